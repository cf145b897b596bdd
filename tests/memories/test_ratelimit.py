"""The per-key rate limit holds across nodes: two web processes (uvicorn, as each node's `serve`
runs it) on one database count one budget per key, in PostgreSQL by default or in Redis with
MEMORYHUB_CACHE_URL; and the window, Retry-After, an unreachable Redis and the idle counters'
clean-up, in this process."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from memories import ratelimit
from memories.jobs.retention_purge import purge_retention
from memories.models import RateLimitCounter
from memoryhub.env import cache_settings
from memoryhub.throwaway import free_port
from tests.factories import make_agent, make_key, make_tenant
from tests.support.commands import BASE_DIR, _wait_answering, command_env
from tests.support.components import component_path

LIMIT = 4
WHOAMI = "/api/v1/whoami"


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A Redis server of this module's own, on a Unix socket, persisting nothing."""
    server_path = component_path("redis-server")
    with tempfile.TemporaryDirectory() as directory:
        socket = Path(directory) / "redis.sock"
        server = subprocess.Popen(
            [server_path, "--port", "0", "--unixsocket", str(socket), "--save", ""]  # noqa: RUF005  two rows
            + ["--appendonly", "no", "--dir", directory],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            client = redis.Redis(unix_socket_path=str(socket))
            deadline = time.monotonic() + 30
            while True:
                assert server.poll() is None, "redis-server exited"
                with contextlib.suppress(redis.ConnectionError, FileNotFoundError):
                    if client.ping():
                        break
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)  # polling a server starting up, not timing anything
            yield f"unix://{socket}"
        finally:
            server.terminate()
            server.wait(30)


@contextlib.contextmanager
def two_nodes(env: dict[str, str]) -> Iterator[list[str]]:
    """Two web processes of their own, each with its own memory, on this test's database."""
    ports = [free_port(), free_port()]
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "memoryhub.asgi:application"]  # noqa: RUF005  two rows
            + ["--port", str(port), "--log-level", "warning", "--no-access-log"],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for port in ports
    ]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, server in zip(urls, servers, strict=True):
            _wait_answering(url, server)
        yield urls
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(30)


def _get(url: str, key: str) -> httpx.Response:
    return httpx.get(url + WHOAMI, headers={"Authorization": f"Bearer {key}"}, timeout=30)


@pytest.mark.parametrize(
    "backend",
    ["postgresql", pytest.param("redis", marks=pytest.mark.requires_component("redis-server"))],
)
def test_the_limit_holds_whichever_node_a_request_reaches(backend, transactional_db, request):
    """LIMIT requests a minute per key across both nodes: request LIMIT + 1 is refused by
    either; and LIMIT × 3 concurrent requests of one key, spread over both, let exactly LIMIT
    in (the count is atomic, not a read and a write)."""
    agent = make_agent(make_tenant("acme"), "support-bot")
    keys = [make_key(agent)[1] for _ in range(3)]
    env = command_env() | {"MEMORYHUB_RATE_LIMIT_PER_MINUTE": str(LIMIT)}
    if backend == "redis":
        env["MEMORYHUB_CACHE_URL"] = request.getfixturevalue("redis_url")
    with two_nodes(env) as (node_a, node_b):
        # Alternating nodes: each saw only half of the first LIMIT, and both refuse the next.
        spent = [_get(url, keys[0]).status_code for url in (node_a, node_b) * (LIMIT // 2)]
        assert spent == [200] * LIMIT
        for url in (node_a, node_b):
            refused = _get(url, keys[0])
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "RATE_LIMITED"
            assert 1 <= int(refused.headers["retry-after"]) <= 60
        # Spent on one node, refused by the other.
        assert [_get(node_b, keys[1]).status_code for _ in range(LIMIT)] == [200] * LIMIT
        assert _get(node_a, keys[1]).status_code == 429
        # All at once, half on each node.
        with ThreadPoolExecutor(max_workers=LIMIT * 3) as pool:
            urls = [node_a, node_b] * (LIMIT * 3 // 2)
            codes = sorted(pool.map(lambda url: _get(url, keys[2]).status_code, urls))
        assert codes == [200] * LIMIT + [429] * (LIMIT * 2)
    # Counted where the backend says: the database's table, or Redis alone.
    counted_in_db = RateLimitCounter.objects.count()
    assert counted_in_db == (3 if backend == "postgresql" else 0)


@pytest.mark.django_db
def test_a_window_closes_a_minute_after_it_opened(api_client, settings):
    """The key's minute opens with its first request; Retry-After is what is left of it, and a
    request after it starts a new one (the window's start moved back, no clock waited for)."""
    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 1
    assert api_client.get(WHOAMI).status_code == 200
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memories_ratelimitcounter "
            "SET window_start = statement_timestamp() - interval '50 seconds'"
        )
    refused = api_client.get(WHOAMI)
    assert refused.status_code == 429
    assert 9 <= int(refused["Retry-After"]) <= 11
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memories_ratelimitcounter "
            "SET window_start = statement_timestamp() - interval '61 seconds'"
        )
    assert api_client.get(WHOAMI).status_code == 200
    assert RateLimitCounter.objects.get().hits == 1
    assert api_client.get(WHOAMI).status_code == 429


@pytest.mark.django_db
def test_an_unreachable_redis_lets_requests_in_and_says_so(
    api_client, settings, monkeypatch, caplog, tmp_path
):
    """A guard against runaway agents must not take the API down: while the cache server
    cannot be reached, requests are answered, with one warning a minute."""
    url = f"unix://{tmp_path / 'nothing-listens-here.sock'}"
    settings.MEMORYHUB_CACHE_URL = url
    settings.CACHES = cache_settings(url)
    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 1
    monkeypatch.setattr(ratelimit, "_last_warning", [float("-inf")])
    with caplog.at_level(logging.WARNING, logger="memories.ratelimit"):
        assert [api_client.get(WHOAMI).status_code for _ in range(3)] == [200] * 3
    warnings = [r for r in caplog.records if r.name == "memories.ratelimit"]
    assert [r.getMessage() for r in warnings] == ["rate limit not counted: the cache server failed"]
    assert not RateLimitCounter.objects.exists()


def test_the_cache_url_names_a_redis_server():
    assert cache_settings("")["default"]["BACKEND"].endswith("LocMemCache")
    redis_cache = cache_settings("redis://cache.internal:6379/1")["default"]
    assert redis_cache["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    assert redis_cache["LOCATION"] == "redis://cache.internal:6379/1"
    with pytest.raises(ImproperlyConfigured, match="MEMORYHUB_CACHE_URL"):
        cache_settings("memcached://cache.internal:11211")


@pytest.mark.django_db
def test_retention_purge_deletes_the_counters_of_idle_keys():
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memories_ratelimitcounter (bucket, window_start, hits) VALUES "
            "('key:1', statement_timestamp() - interval '25 hours', 3), "
            "('key:2', statement_timestamp() - interval '2 minutes', 5)"
        )
    purge_retention()
    assert list(RateLimitCounter.objects.values_list("bucket", flat=True)) == ["key:2"]

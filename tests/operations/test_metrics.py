"""`GET /metrics` (docs/operations.md#monitoring): the token, the families, bounded labels, every
process added up, and `serve`'s ready line."""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from rest_framework.test import APIClient

from accounts.principal import Principal
from memories.jobs.backup import backup_schedule_sync
from memories.services.store import memory_store
from memoryhub.throwaway import free_port
from tests.support.commands import _wait_answering, command_env

TOKEN = "scrape-token-for-tests"
BASE_DIR = Path(settings.BASE_DIR)


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition `text` (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def scrape(client) -> str:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.mark.django_db
def test_metrics_answer_only_the_token(client, settings):
    settings.MEMORYHUB_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 404
    settings.MEMORYHUB_METRICS_TOKEN = TOKEN
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {TOKEN}").status_code == 404
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


@pytest.mark.django_db
def test_requests_are_counted_by_route_never_by_path(client, settings, tenant, agent, api_client):
    settings.MEMORYHUB_METRICS_TOKEN = TOKEN
    route = "/api/v1/memories/<str:memory_id>"
    before = sample(scrape(client), "memoryhub_http_requests_total", route=route, status="404")
    for n in range(7):
        assert api_client.get(f"/api/v1/memories/mem_{n:026d}").status_code == 404
    text = scrape(client)
    assert sample(text, "memoryhub_http_requests_total", route=route, status="404") == before + 7
    assert sample(text, "memoryhub_http_request_duration_seconds_count", route=route) >= 7
    assert "mem_0" not in text  # no raw path in any label
    routes = set(re.findall(r'route="([^"]*)"', text))
    assert routes <= {f"/{p}" for p in _patterns()} | {"unmatched", "static", "/mcp"}
    api_client.get("/api/v1/no/such/thing")
    assert 'route="unmatched"' in scrape(client)


def _patterns() -> set[str]:
    from django.urls import get_resolver

    def walk(resolver, prefix=""):
        for entry in resolver.url_patterns:
            pattern = prefix + str(entry.pattern)
            if hasattr(entry, "url_patterns"):
                yield from walk(entry, pattern)
            else:
                yield pattern

    return set(walk(get_resolver()))


@pytest.mark.django_db
def test_the_database_gauges_come_from_the_counters(client, settings, tenant, agent):
    settings.MEMORYHUB_METRICS_TOKEN = TOKEN
    principal = Principal(tenant=tenant, agent=agent)
    for text, mode in (("a", "explicit"), ("b", "inferred"), ("c", "inferred")):
        memory_store(principal=principal, data={"text": text, "capture_mode": mode})
    text = scrape(client)
    assert sample(text, "memoryhub_memories_live", tenant="acme") == 3
    assert sample(text, "memoryhub_reviews_pending", tenant="acme") == 2
    assert re.search(r"^memoryhub_queue_depth \d", text, re.M)
    for family in (
        "memoryhub_http_requests_total",
        "memoryhub_http_request_duration_seconds",
        "memoryhub_embed_duration_seconds",
    ):
        assert f"# TYPE {family.removesuffix('_total')}" in text


@pytest.mark.django_db
def test_the_access_log_names_route_and_slugs_never_the_key_or_query(
    settings, caplog, tenant, agent, api_key
):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    with caplog.at_level(logging.INFO, logger="memoryhub.access"):
        client.get("/api/v1/memories/by-key/secret-key-name", {"subject_id": "cust-9"})
    (line,) = [r.getMessage() for r in caplog.records if r.name == "memoryhub.access"]
    assert re.fullmatch(
        r"method=GET route=/api/v1/memories/by-key/<path:key> status=200 "
        r"duration_ms=\d+\.\d tenant=acme agent=support-bot client=127\.0\.0\.1",
        line,
    ), line
    assert api_key not in line and "secret-key-name" not in line and "cust-9" not in line


@pytest.fixture
def metrics_env(transactional_db):
    directory = Path(tempfile.mkdtemp(prefix="memoryhub-metrics-"))
    env = command_env() | {
        "PROMETHEUS_MULTIPROC_DIR": str(directory),
        "MEMORYHUB_METRICS_TOKEN": TOKEN,
        "MEMORYHUB_EMBEDDER": "hashing",
    }
    env["DJANGO_SETTINGS_MODULE"] = "memoryhub.settings"  # as served...
    env["MEMORYHUB_DB_POOL"] = "0"  # ...but the pool off (one connection per thread)
    yield env
    shutil.rmtree(directory, ignore_errors=True)


def _uvicorn(port: int, env: dict[str, str]) -> subprocess.Popen:
    """One web process serving the app, as a uvicorn worker of `serve` does."""
    return subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "memoryhub.asgi:application", "--port", str(port)]  # noqa: RUF005  two rows
        + ["--log-level", "warning", "--no-access-log"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_two_web_processes_are_added_up(metrics_env):
    """Two servers sharing one PROMETHEUS_MULTIPROC_DIR, as uvicorn's workers do under
    `serve`: a scrape of either counts the requests of both."""
    ports = [free_port(), free_port()]
    servers = [_uvicorn(port, metrics_env) for port in ports]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, server in zip(urls, servers, strict=True):
            _wait_answering(url, server)
        for url, n in ((urls[0], 3), (urls[1], 5)):
            for _ in range(n):
                assert httpx.get(url + "/healthz").status_code == 200
        texts = [
            httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
            for url in urls
        ]
        for text in texts:
            # 2 waits + 8 requests; a scrape counts once answered.
            got = sample(text, "memoryhub_http_requests_total", route="/healthz", method="GET")
            assert got == 10, text
        pids = {
            p.name.rsplit("_", 1)[1]
            for p in Path(metrics_env["PROMETHEUS_MULTIPROC_DIR"]).glob("counter_*.db")
        }
        assert pids == {f"{s.pid}.db" for s in servers}
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(30)


def _documented_families() -> dict[str, tuple[str, dict[str, list[str]]]]:
    """docs/operations.md's table of families: name → (type, {label: documented values})."""
    table = (BASE_DIR / "docs" / "operations.md").read_text()
    families = {}
    for row in re.findall(r"^\| `(memoryhub_\w+)` \| (\w+) \|([^|]*)\|", table, re.M):
        name, kind, labels = row
        named = {
            label: re.findall(r"`([^`]+)`", values)
            for label, values in re.findall(r"`(\w+)`( \([^)]*\))?", labels)
        }
        families[name] = (kind, named)
    return families


def test_a_fresh_server_lists_every_documented_family_from_the_first_scrape(
    metrics_env, settings, tmp_path
):
    """Before anything was extracted, delivered or pooled, each family of the docs' table is
    there, at zero for every label value the table names (in multiprocess mode, as served).
    Scheduled backups are on (their gauge exists only then), none made yet."""
    settings.MEMORYHUB_BACKUP_DIR = str(tmp_path)
    backup_schedule_sync()
    families = _documented_families()
    assert len(families) >= 11
    port = free_port()
    server = _uvicorn(port, metrics_env)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_answering(url, server)
        text = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
    finally:
        server.terminate()
        server.wait(30)
    for name, (kind, labels) in families.items():
        # A counter's TYPE line names it with or without `_total`, by the exposition's mode.
        types = {f"# TYPE {name} {kind}", f"# TYPE {name.removesuffix('_total')} {kind}"}
        assert any(line in text for line in types), name
        if "tenant" in labels:
            continue  # one series per tenant, and a fresh database has none
        sample_name = name + ("_count" if kind == "histogram" else "")
        assert re.search(rf"^{sample_name}[{{ ]", text, re.M), name
        for label, values in labels.items():
            for value in values:
                line = re.search(
                    rf'^{sample_name}{{[^}}]*{label}="{value}"[^}}]*}} (\S+)$', text, re.M
                )
                assert line is not None, (name, label, value)
                assert float(line.group(1)) == 0, (name, label, value)


def test_the_zeroed_label_values_are_the_documented_ones():
    """What a process writes at zero is what the docs' table promises, and a finished run's
    states are the ones its model has."""
    from memories.models import RunState
    from memoryhub import metrics

    documented = _documented_families()
    for family, values in metrics.KNOWN_LABELS:
        name = family._name + ("_total" if family._type == "counter" else "")
        _kind, labels = documented[name]
        if len(family._labelnames) == 1 and labels[family._labelnames[0]]:
            assert {v[0] for v in values} == set(labels[family._labelnames[0]]), name
    assert {RunState.DONE.value, RunState.FAILED.value} == set(
        documented["memoryhub_extraction_runs_total"][1]["state"]
    )


@pytest.mark.slow
def test_serve_prints_one_ready_line_and_shares_the_metrics_directory(metrics_env):
    port = free_port()
    env = dict(metrics_env)
    directory = env.pop("PROMETHEUS_MULTIPROC_DIR")
    stale = Path(directory) / "counter_999999.db"
    stale.write_bytes(b"left by a previous run")
    env["PROMETHEUS_MULTIPROC_DIR"] = directory
    process = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--no-cluster", "--workers", "2"]  # noqa: RUF005  two rows
        + ["--port", str(port)],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline()
        base = f"http://127.0.0.1:{port}"
        assert line.strip() == (
            f"MemoryHub ready on {base}: console {base}/console/, API {base}/api/v1/, "
            f"MCP {base}/mcp, metrics {base}/metrics. Ctrl-C stops."
        )
        assert not stale.exists()  # emptied at start
        for _ in range(20):
            with httpx.Client() as fresh:  # a connection each: either worker may take it
                assert fresh.get(base + "/healthz").status_code == 200
        text = httpx.get(base + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
        # 20 requests, and the ready probe's one.
        assert sample(text, "memoryhub_http_requests_total", route="/healthz") == 21
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=60)
    assert "ready" not in out  # one ready line only
    assert os.path.isdir(directory)

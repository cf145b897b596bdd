"""Serving defaults: one web process per core, one pool of threads per process (Django and the
MCP tools alike), no thread made per request."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

import pytest
from django.conf import settings

from memories import onnx_minilm
from memories.mcp import calls as mcp_calls
from memoryhub import asgi, supervisor
from memoryhub.management.commands import serve
from memoryhub.web_pool import web_executor


def test_serve_runs_one_web_process_per_core_unless_told(monkeypatch, tmp_path):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    monkeypatch.setattr(supervisor, "CGROUP_CPU_MAX", tmp_path / "absent")
    monkeypatch.setattr(serve.os, "sched_getaffinity", lambda pid: {0, 1})
    assert supervisor.default_workers() == 2
    monkeypatch.setattr(serve.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert supervisor.default_workers() == 64  # no fixed cap
    quota = tmp_path / "cpu.max"
    quota.write_text("250000 100000\n")  # a container allowed 2.5 CPUs
    monkeypatch.setattr(supervisor, "CGROUP_CPU_MAX", quota)
    assert supervisor.default_workers() == 3
    quota.write_text("max 100000\n")
    assert supervisor.default_workers() == 64
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert supervisor.default_workers() == 3
    parser = serve.Command().create_parser("manage.py", "serve")
    assert parser.parse_args([]).workers == 3


def test_the_embedder_counts_the_cores_as_serve_does(monkeypatch, tmp_path):
    """The local embedder's idle threads are sized by the same count as the web processes: a
    container allowed one CPU of a 4-core host has one core for both."""
    monkeypatch.setattr(supervisor.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    quota = tmp_path / "cpu.max"
    quota.write_text("100000 100000\n")
    monkeypatch.setattr(supervisor, "CGROUP_CPU_MAX", quota)
    assert onnx_minilm.available_cores() == supervisor.available_cores() == 1


@pytest.mark.parametrize(
    ("workers", "threads", "branches", "pool"),
    [(None, 16, 2, 20), ("8", 16, 2, 20), ("16", 6, 2, 10), ("64", 2, 0, 4)],
)
def test_web_processes_share_postgresql_connections_by_their_number(
    workers, threads, branches, pool
):
    """16 request threads, 2 search branch threads and 20 connections a process, or less once
    the processes together would hold more than MEMORYHUB_DB_CONNECTIONS (160)."""
    env = dict(os.environ, MEMORYHUB_DB_POOL="1", DJANGO_SETTINGS_MODULE="memoryhub.settings")
    for name in (
        "MEMORYHUB_WEB_THREADS",
        "MEMORYHUB_SEARCH_BRANCH_THREADS",
        "MEMORYHUB_DB_POOL_SIZE",
        "MEMORYHUB_DB_CONNECTIONS",
    ):
        env.pop(name, None)
    env.pop("WEB_CONCURRENCY", None)
    if workers:
        env["WEB_CONCURRENCY"] = workers
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.MEMORYHUB_WEB_THREADS, s.MEMORYHUB_SEARCH_BRANCH_THREADS, "
        "s.DATABASES['default']['OPTIONS']['pool']['max_size'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [str(threads), str(branches), str(pool)]


@pytest.mark.django_db(transaction=True)  # a reused pool thread may hold a connection
def test_django_and_the_mcp_tools_share_one_fixed_pool_of_threads():
    pool = web_executor()
    assert asgi.django_wsgi_pool.executor is pool
    assert pool._max_workers == settings.MEMORYHUB_WEB_THREADS

    def where():
        return {"thread": threading.current_thread().name}

    async def calls():
        return [await mcp_calls.call(where) for _ in range(20)]

    names = {result["thread"] for result in asyncio.run(calls())}
    assert all(name.startswith("web") for name in names)
    # Twenty calls one after another reuse the pool's threads rather than making new ones.
    assert len(names) <= settings.MEMORYHUB_WEB_THREADS
    assert len(pool._threads) <= settings.MEMORYHUB_WEB_THREADS

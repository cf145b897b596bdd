"""Serving defaults: one web process per core, one pool of threads per process (Django and the
MCP tools alike), no thread made per request."""

from __future__ import annotations

import asyncio
import threading

import pytest
from django.conf import settings

from memories.mcp import calls as mcp_calls
from memoryhub import asgi
from memoryhub.management.commands import serve
from memoryhub.web_pool import web_executor


def test_serve_runs_one_web_process_per_core_unless_told(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 2)
    assert serve.default_workers() == 2
    monkeypatch.setattr(serve.os, "cpu_count", lambda: 64)
    assert serve.default_workers() == serve.MAX_DEFAULT_WORKERS
    monkeypatch.setattr(serve.os, "cpu_count", lambda: None)
    assert serve.default_workers() == 1
    monkeypatch.setenv("WEB_CONCURRENCY", "3")
    assert serve.default_workers() == 3
    parser = serve.Command().create_parser("manage.py", "serve")
    assert parser.parse_args([]).workers == 3


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

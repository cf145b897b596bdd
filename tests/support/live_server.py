"""A real ASGI server (uvicorn, the app `make run` serves) on a free port, in a thread: the
fixture `asgi_server`, used by the MCP tests and the Python client's tests."""

from __future__ import annotations

import threading

import pytest
import uvicorn
from django.db import connections

from memoryhub.throwaway import free_port


@pytest.fixture
def asgi_server(transactional_db):
    from memoryhub.asgi import application

    port = free_port()
    # As `serve` runs it: uvicorn's proxy headers off, the app applies the trusted-proxy rule.
    config = uvicorn.Config(
        application,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="on",
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    started = threading.Event()
    # Wait for the server to accept connections (bounded; no fixed sleep).
    for _ in range(500):
        if server.started:
            started.set()
            break
        thread.join(timeout=0.02)
    assert started.is_set(), "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    # The app's database connections live in its worker threads (the WSGI pool, asgiref's
    # executor): end those sessions so the test database can be dropped. A thread that serves
    # again later finds its connection unusable and opens a new one (CONN_HEALTH_CHECKS).
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )

"""A real ASGI server (uvicorn, the app `make run` serves) on a free port, in a thread."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
import uvicorn
from asgiref.sync import sync_to_async
from django.db import connections


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def asgi_server(transactional_db):
    from memoryhub.asgi import application

    port = _free_port()
    config = uvicorn.Config(
        application, host="127.0.0.1", port=port, log_level="warning", lifespan="on"
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
    # The app's database connection lives in asgiref's sync thread: close it there, so the
    # test database can be dropped.
    asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())

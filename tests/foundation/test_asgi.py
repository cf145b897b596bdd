"""The deployed ASGI app (`memoryhub.asgi.application`) hands Django whole request bodies."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.db import connections

from memories.embeddings import reset_embedder
from memories.models import Memory
from memoryhub.asgi import application
from tests.factories import asgi_http_scope, asgi_lifespan, make_agent, make_key, make_tenant


def _post(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    scope = asgi_http_scope("POST", path, headers)
    pending = [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(application(scope, receive, send))
    start, *bodies = sent
    return start["status"], json.loads(b"".join(m.get("body", b"") for m in bodies))


@pytest.fixture
def raw_key(transactional_db, monkeypatch):
    # The pool thread's connection closes when its request ends (it would outlive the test).
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)
    _, raw = make_key(make_agent(make_tenant("acme")))
    return raw


def test_a_chunked_body_reaches_django_whole(raw_key):
    body = json.dumps({"text": "Sent in chunks, without a Content-Length."}).encode()
    status, answer = _post(
        "/api/v1/memories",
        [body[:10], body[10:25], body[25:], b""],
        [
            (b"authorization", f"Bearer {raw_key}".encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
    )
    assert status == 201, answer
    assert Memory.objects.get(pk=answer["memory_id"]).text == (
        "Sent in chunks, without a Content-Length."
    )


def test_a_chunked_body_over_the_limit_is_413(raw_key, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    status, answer = _post(
        "/api/v1/memories",
        [b'{"text": "' + b"x" * 600, b"y" * 600 + b'"}'],
        [
            (b"authorization", f"Bearer {raw_key}".encode()),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
    )
    assert status == 413
    assert answer["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert not Memory.objects.exists()


def test_a_misconfigured_embedder_does_not_stop_a_web_process_starting(settings, caplog):
    settings.MEMORYHUB_EMBEDDER = "nope"
    reset_embedder()
    try:
        assert asgi_lifespan() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    finally:
        reset_embedder()
    assert "the embedder is not ready (Unknown embedder 'nope')" in caplog.text

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


def _exchange(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]], *, last=True):
    """The ASGI messages the app sends for a POST whose body comes in `chunks` (`last`: the
    final chunk says so; else the client goes away after them)."""
    scope = asgi_http_scope("POST", path, headers)
    pending = [
        {"type": "http.request", "body": chunk, "more_body": not last or i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(application(scope, receive, send))
    return sent


def _post(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]):
    start, *bodies = _exchange(path, chunks, headers)
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


@pytest.mark.parametrize(
    "framing",
    [(b"transfer-encoding", b"chunked"), (b"content-length", b"1212")],
    ids=["chunked", "declared"],
)
def test_a_body_over_the_limit_is_413(raw_key, settings, framing):
    """Chunked: read here up to the limit, then refused; declared: handed to Django unread,
    whose middleware refuses it."""
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    status, answer = _post(
        "/api/v1/memories",
        [b'{"text": "' + b"x" * 600, b"y" * 600 + b'"}'],
        [
            (b"authorization", f"Bearer {raw_key}".encode()),
            (b"content-type", b"application/json"),
            framing,
        ],
    )
    assert status == 413
    assert answer["error"]["code"] == "PAYLOAD_TOO_LARGE"
    assert not Memory.objects.exists()


def test_an_answer_is_sent_whole_with_its_length(raw_key):
    """Django's answer leaves in one body message, with a Content-Length that matches it (made
    in the pool's thread, handed to the event loop once)."""
    body = json.dumps({"text": "Answered in one piece."}).encode()
    headers = [
        (b"authorization", f"Bearer {raw_key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
    ]
    start, *bodies = _exchange("/api/v1/memories", [body[:7], body[7:]], headers)
    assert start["status"] == 201
    assert len(bodies) == 1 and not bodies[0].get("more_body", False)
    length = dict(start["headers"])[b"content-length"]
    assert int(length) == len(bodies[0]["body"])
    assert json.loads(bodies[0]["body"])["memory_id"].startswith("mem_")


def test_a_client_gone_before_its_body_ends_reaches_no_view(raw_key):
    body = json.dumps({"text": "Never finished."}).encode()
    headers = [
        (b"authorization", f"Bearer {raw_key}".encode()),
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
    ]
    assert _exchange("/api/v1/memories", [body[:5]], headers, last=False) == []
    assert not Memory.objects.exists()


def test_a_misconfigured_embedder_does_not_stop_a_web_process_starting(settings, caplog):
    settings.MEMORYHUB_EMBEDDER = "nope"
    reset_embedder()
    try:
        assert asgi_lifespan() == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    finally:
        reset_embedder()
    assert "the embedder is not ready (Unknown embedder 'nope')" in caplog.text

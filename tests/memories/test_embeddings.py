"""Embedding backends (docs/operations.md#embedders): hashing, local all-MiniLM-L6-v2,
OpenAI-compatible HTTP, auto."""

from __future__ import annotations

import json
import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from memories import embeddings
from memories.embeddings import (
    HashingEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    build_embedder,
    reset_embedder,
)
from memories.models import EMBEDDING_DIM
from memoryhub.errors import EmbeddingError


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_hashing_is_deterministic_normalised_and_lexical():
    one, two = HashingEmbedder(), HashingEmbedder()
    a = one.embed(["Colby lives in Los Angeles"])[0]
    assert a == two.embed(["Colby lives in Los Angeles"])[0]
    assert len(a) == EMBEDDING_DIM and norm(a) == pytest.approx(1.0)
    near = one.embed(["colby LIVES in los angeles!"])[0]
    far = one.embed(["quarterly revenue grew five percent"])[0]
    assert cosine(a, near) == pytest.approx(1.0)
    assert cosine(a, far) < 0.3
    empty = one.embed([""])[0]
    assert norm(empty) == pytest.approx(1.0)


@pytest.mark.slow
def test_local_model_loads_and_gives_sensible_similarities():
    if not LocalEmbedder.available():
        pytest.skip("local-embeddings extra not installed")
    embedder = LocalEmbedder()
    cat, kitten, revenue = embedder.embed(
        ["The cat sits on the mat.", "A kitten is resting on a rug.", "Quarterly revenue grew 5%."]
    )
    assert embedder.model_name == "all-MiniLM-L6-v2"
    assert len(cat) == EMBEDDING_DIM and norm(cat) == pytest.approx(1.0, abs=1e-4)
    assert cosine(cat, kitten) > 0.4
    assert cosine(cat, kitten) > cosine(cat, revenue) + 0.3
    assert embedder.embed([]) == []


class FakeEndpoint:
    """A tiny OpenAI-compatible /v1/embeddings server on 127.0.0.1 (scripted replies)."""

    def __init__(self, replies):
        self.replies = list(replies)
        self.requests = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                endpoint.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                status, payload = endpoint.replies.pop(0) if endpoint.replies else (500, {})
                if callable(payload):
                    payload = payload(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def vectors_reply(body):
    """Unnormalised vectors, returned in reverse index order (clients must sort by index)."""
    items = []
    for index, _text in enumerate(body["input"]):
        vector = [0.0] * EMBEDDING_DIM
        vector[index] = 3.0
        vector[index + 1] = 4.0
        items.append({"object": "embedding", "index": index, "embedding": vector})
    return {"object": "list", "data": list(reversed(items)), "model": body["model"]}


def client(url, **kwargs):
    return OpenAIEmbedder(url=url, model="text-embedding-3-small", api_key="sk-test", **kwargs)


def test_openai_success_sorts_by_index_and_normalises():
    with FakeEndpoint([(200, vectors_reply)]) as fake:
        embedder = client(fake.url)
        first, second = embedder.embed(["alpha", "beta"])
    assert first[:3] == pytest.approx([0.6, 0.8, 0.0])
    assert second[:3] == pytest.approx([0.0, 0.6, 0.8])
    [request] = fake.requests
    assert request["path"] == "/v1/embeddings"
    assert request["auth"] == "Bearer sk-test"
    assert request["body"] == {
        "model": "text-embedding-3-small",
        "input": ["alpha", "beta"],
        "dimensions": EMBEDDING_DIM,
    }
    assert embedder.model_name == "openai:text-embedding-3-small"


def test_openai_retries_transient_failures_with_backoff():
    replies = [(503, {"error": "busy"}), (429, {"error": "slow down"}), (200, vectors_reply)]
    with FakeEndpoint(replies) as fake:
        [vector] = client(fake.url, retries=3, backoff=0.0).embed(["alpha"])
    assert len(fake.requests) == 3
    assert norm(vector) == pytest.approx(1.0)


def test_openai_gives_up_with_embedding_error_after_retries():
    with FakeEndpoint([(500, {})] * 5) as fake, pytest.raises(EmbeddingError) as caught:
        client(fake.url, retries=2, backoff=0.0).embed(["alpha"])
    assert len(fake.requests) == 3
    assert caught.value.code == "EMBEDDING_ERROR" and caught.value.status == 502
    assert caught.value.details == {"embedder": "openai", "status": "HTTP 500"}


def test_openai_client_errors_fail_at_once():
    with FakeEndpoint([(401, {"error": "bad key"})]) as fake, pytest.raises(EmbeddingError):
        client(fake.url, retries=3, backoff=0.0).embed(["alpha"])
    assert len(fake.requests) == 1


def test_openai_rejects_wrong_dimension_and_garbage():
    short = {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}
    with FakeEndpoint([(200, short), (200, {"nope": 1})]) as fake:
        embedder = client(fake.url, backoff=0.0)
        with pytest.raises(EmbeddingError, match="384"):
            embedder.embed(["alpha"])
        with pytest.raises(EmbeddingError, match="unreadable"):
            embedder.embed(["alpha"])


def test_openai_unreachable_endpoint():
    with FakeEndpoint([]) as fake:
        url = fake.url
    with pytest.raises(EmbeddingError) as caught:
        client(url, retries=1, backoff=0.0, timeout=1.0).embed(["alpha"])
    assert caught.value.details["status"] == "ConnectError"


@pytest.mark.django_db
def test_store_answers_502_when_the_embedder_fails(api_client, settings):
    with FakeEndpoint([(500, {})] * 10) as fake:
        settings.MEMORYHUB_EMBEDDER = "openai"
        settings.MEMORYHUB_EMBEDDER_URL = fake.url
        reset_embedder()
        embeddings.get_embedder().backoff = 0.0
        try:
            response = api_client.post("/api/v1/memories", {"text": "x"}, format="json")
            search = api_client.post("/api/v1/search", {"query": "x"}, format="json")
        finally:
            reset_embedder()
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "EMBEDDING_ERROR"
    assert search.status_code == 502


def test_auto_prefers_local_and_falls_back_to_hashing(monkeypatch, caplog):
    monkeypatch.setattr(LocalEmbedder, "available", staticmethod(lambda: True))
    assert isinstance(build_embedder("auto"), LocalEmbedder)
    monkeypatch.setattr(LocalEmbedder, "available", staticmethod(lambda: False))
    with caplog.at_level(logging.WARNING, logger="memories.embeddings"):
        assert isinstance(build_embedder("auto"), HashingEmbedder)
    assert "hashing embedder" in caplog.text
    with pytest.raises(EmbeddingError):
        build_embedder("word2vec")

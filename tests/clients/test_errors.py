"""Every error code of the API (docs/api.md#errors) reaches the caller as its own exception class,
with `.code`, `.status`, `.details` (and `.current_version`, `.retry_after`, `.rule` where they
apply)."""

from __future__ import annotations

import random
import string
import uuid

import pytest
from memoryhub_client import (
    BackendUnavailableError,
    ConflictError,
    DatabaseError,
    EmbeddingError,
    IdempotencyMismatchError,
    InvalidInputError,
    MemoryHubConnectionError,
    MemoryHubError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    RateLimitedError,
    RetryPolicy,
    ScopeDeniedError,
    SecretRejectedError,
    UnauthenticatedError,
)
from memoryhub_client.errors import ERRORS_BY_CODE

from memories.embeddings import reset_embedder
from memoryhub import db_outage
from memoryhub.throwaway import free_port
from tests.factories import make_key
from tests.support.flaky_proxy import FlakyProxy, envelope

NO_RETRY = RetryPolicy(retries=0, jitter=False)
GITHUB_TOKEN = "ghp_" + "".join(random.Random(3).choices(string.ascii_letters, k=36))


def test_one_class_per_api_error_code():
    assert set(ERRORS_BY_CODE) == {
        "INVALID_INPUT",
        "UNAUTHENTICATED",
        "SCOPE_DENIED",
        "NOT_FOUND",
        "CONFLICT",
        "PAYLOAD_TOO_LARGE",
        "IDEMPOTENCY_MISMATCH",
        "SECRET_REJECTED",
        "QUOTA_EXCEEDED",
        "RATE_LIMITED",
        "EMBEDDING_ERROR",
        "BACKEND_UNAVAILABLE",
        "DATABASE_ERROR",
    }
    assert all(issubclass(cls, MemoryHubError) for cls in ERRORS_BY_CODE.values())


def test_client_errors(hub, make_hub, live):
    with pytest.raises(InvalidInputError) as err:
        hub.store(tags=["ok"])  # neither text nor data
    assert (err.value.status, err.value.code, err.value.field) == (400, "INVALID_INPUT", "text")

    with pytest.raises(UnauthenticatedError) as err:
        make_hub(key="mh_" + "x" * 40).keys()
    assert err.value.status == 401

    _, read_only = make_key(live.agent, scopes=["read"])
    with pytest.raises(ScopeDeniedError) as err:
        make_hub(key=read_only).store("a fact")
    assert err.value.status == 403

    with pytest.raises(NotFoundError) as err:
        hub.get("mem_01JAAAAAAAAAAAAAAAAAAAAAAA")
    assert err.value.status == 404

    hub.store("v1", key="cas")
    with pytest.raises(ConflictError) as err:
        hub.store("v2", key="cas", expected_version=5)
    assert (err.value.status, err.value.current_version) == (409, 1)

    with pytest.raises(PayloadTooLargeError) as err:
        hub.store("x" * 2_000_000)
    assert err.value.status == 413

    idem = uuid.uuid4().hex
    hub.store("first body", idempotency_key=idem)
    with pytest.raises(IdempotencyMismatchError) as err:
        hub.store("another body", idempotency_key=idem)
    assert err.value.status == 422

    with pytest.raises(SecretRejectedError) as err:
        hub.store(f"the token is {GITHUB_TOKEN}")
    assert err.value.status == 422 and err.value.rule and GITHUB_TOKEN not in str(err.value)
    assert err.value.details["field"] == "text"


def test_quota_and_rate_limit(make_hub, live, settings):
    live.agent.entry_cap = 0
    live.agent.save(update_fields=["entry_cap"])
    hub = make_hub(retry=NO_RETRY)
    with pytest.raises(QuotaExceededError) as err:
        hub.store("nothing fits")
    assert (err.value.status, err.value.details) == (429, {"entry_cap": 0})

    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 1
    hub.keys()
    with pytest.raises(RateLimitedError) as err:
        hub.keys()
    assert err.value.status == 429 and err.value.retry_after and err.value.retry_after > 0
    assert live.sleeps == []  # retries=0: raised at once


def test_embedding_error(hub, settings):
    settings.MEMORYHUB_EMBEDDER = "no-such-embedder"
    reset_embedder()
    try:
        with pytest.raises(EmbeddingError) as err:
            hub.store("needs an embedding")
    finally:
        reset_embedder()
    assert (err.value.status, err.value.details) == (502, {"embedder": "no-such-embedder"})


def test_backend_unavailable(make_hub, monkeypatch, live):
    # The server's own outage answer (its middleware, while the watcher says the database is
    # down); the client gives up after its retries, each waiting the server's Retry-After.
    monkeypatch.setattr(db_outage, "is_down", lambda: True)
    hub = make_hub(retry=RetryPolicy(retries=2, jitter=False))
    with pytest.raises(BackendUnavailableError) as err:
        hub.keys()
    assert (err.value.status, err.value.retry_after) == (503, 5.0)
    assert live.sleeps == [5.0, 5.0]


def test_database_error(make_hub, live):
    # A 500 DATABASE_ERROR cannot be provoked from outside without breaking PostgreSQL, so the
    # proxy answers the server's envelope for it; what is tested is the client's mapping.
    answer = (
        "status",
        500,
        {"Content-Type": "application/json"},
        envelope("DATABASE_ERROR", "Database error"),
    )
    with FlakyProxy.running(live.url, [answer]) as proxy, pytest.raises(DatabaseError) as err:
        make_hub(url=proxy.url).keys()
    assert (err.value.status, err.value.code) == (500, "DATABASE_ERROR")
    assert live.sleeps == []  # a 500 is not retried


def test_not_our_error_body(make_hub, live):
    answer = ("status", 502, {"Content-Type": "text/html"}, b"<html>Bad gateway</html>")
    with FlakyProxy.running(live.url, [answer]) as proxy, pytest.raises(MemoryHubError) as err:
        make_hub(url=proxy.url).keys()
    assert type(err.value) is MemoryHubError and err.value.status == 502


def test_connection_error_after_retries(make_hub, live):
    hub = make_hub(
        url=f"http://127.0.0.1:{free_port()}", retry=RetryPolicy(retries=2, jitter=False)
    )
    with pytest.raises(MemoryHubConnectionError) as err:
        hub.keys()
    assert err.value.status is None and err.value.__cause__ is not None
    assert live.sleeps == [0.5, 1.0]  # exponential back-off

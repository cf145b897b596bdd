"""Real concurrency on real PostgreSQL: threads with their own connections and transactions."""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections
from rest_framework.test import APIClient

from memories.models import IdempotencyRecord, Memory, MemoryRevision, OwnerCount
from tests.factories import make_agent, make_key, make_tenant

N = 20


def _run_concurrently(n, call):
    """Run `call(i)` in n threads released together; each closes its own DB connection."""
    barrier = threading.Barrier(n)

    def worker(i):
        try:
            barrier.wait(timeout=30)
            return call(i)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(worker, range(n)))


@pytest.fixture
def raw_key(transactional_db):
    agent = make_agent(make_tenant("acme"), "support-bot")
    return make_key(agent)[1]


def _client(raw):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_patches_with_one_expected_version(raw_key):
    created = _client(raw_key).post("/api/v1/memories", {"text": "v0"}, format="json").json()
    memory_id = created["memory_id"]

    def patch(i):
        response = _client(raw_key).patch(
            f"/api/v1/memories/{memory_id}",
            {"text": f"writer {i}", "expected_version": 1},
            format="json",
        )
        return response.status_code, response.json()

    results = _run_concurrently(N, patch)
    statuses = sorted(status for status, _ in results)
    assert statuses == [200] + [409] * (N - 1)
    for status, body in results:
        if status == 409:
            assert body == {
                "ok": False,
                "error": {
                    "code": "CONFLICT",
                    "message": "The memory has changed since you read it",
                    "details": {"current_version": 2},
                },
            }
    memory = Memory.objects.get(pk=memory_id)
    assert memory.version == 2
    winner = next(body for status, body in results if status == 200)
    assert memory.text == winner["memory"]["text"]
    assert MemoryRevision.objects.filter(memory_id=memory_id).count() == 2


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_posts_with_one_idempotency_key(raw_key):
    body = {"text": "Colby's birthday is 3 May", "tags": ["family"]}

    def post(i):
        response = _client(raw_key).post(
            "/api/v1/memories", body, format="json", HTTP_IDEMPOTENCY_KEY="retry-42"
        )
        return response.status_code, response.content

    results = _run_concurrently(N, post)
    assert {status for status, _ in results} == {201}
    assert len({content for _, content in results}) == 1  # byte-identical responses
    assert Memory.objects.count() == 1
    assert MemoryRevision.objects.count() == 1
    assert IdempotencyRecord.objects.count() == 1

    other = _client(raw_key).post(
        "/api/v1/memories",
        {"text": "something else"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="retry-42",
    )
    assert other.status_code == 422
    assert other.json() == {
        "ok": False,
        "error": {
            "code": "IDEMPOTENCY_MISMATCH",
            "message": "This Idempotency-Key was used with a different body",
            "details": {},
        },
    }
    assert Memory.objects.count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_keyed_stores_never_duplicate(raw_key):
    def put(i):
        response = _client(raw_key).post(
            "/api/v1/memories", {"key": "status", "text": f"state {i}"}, format="json"
        )
        return response.status_code

    statuses = _run_concurrently(N, put)
    assert sorted(statuses) == [200] * (N - 1) + [201]
    memory = Memory.objects.get()
    assert memory.version == N
    assert MemoryRevision.objects.filter(memory=memory).count() == N


@pytest.mark.django_db(transaction=True)
def test_concurrent_stores_respect_the_entry_cap(raw_key):
    agent = Memory._meta.apps.get_model("accounts", "Agent").objects.get(slug="support-bot")
    agent.entry_cap = 5
    agent.save()

    def put(i):
        return (
            _client(raw_key)
            .post(
                "/api/v1/memories",
                {"text": f"fact number {i}", "category": "daily", "dedup_policy": "insert"},
                format="json",
            )
            .status_code
        )

    assert set(_run_concurrently(12, put)) == {201}
    assert Memory.objects.filter(status="active").count() == 5
    assert Memory.objects.filter(status="evicted").count() == 7
    assert OwnerCount.objects.get(owner_id=agent.pk).active == 5


@pytest.mark.django_db(transaction=True)
def test_twenty_concurrent_unconditioned_patches_all_apply(raw_key):
    created = _client(raw_key).post("/api/v1/memories", {"text": "v0"}, format="json").json()
    memory_id = created["memory_id"]

    def patch(i):
        return (
            _client(raw_key)
            .patch(f"/api/v1/memories/{memory_id}", {"text": f"writer {i}"}, format="json")
            .status_code
        )

    assert _run_concurrently(N, patch) == [200] * N
    memory = Memory.objects.get(pk=memory_id)
    assert memory.version == N + 1
    revisions = MemoryRevision.objects.filter(memory_id=memory_id)
    assert sorted(revisions.values_list("version", flat=True)) == list(range(1, N + 2))
    # Each revision's `before` is exactly the previous revision's `after`.
    ordered = list(revisions.order_by("version"))
    for previous, current in itertools.pairwise(ordered):
        assert current.before == previous.after

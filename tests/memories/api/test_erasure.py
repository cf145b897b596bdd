"""Subject erasure (docs/formation.md#erasure-and-retention):
`DELETE /api/v1/subjects/{subject_id}`, purge or tombstone, for the key's tenant only and that
subject only."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.formation.ingest import thread_messages_add
from memories.formation.runs import run_execute, run_request
from memories.idempotency import key_digest
from memories.models import (
    ExtractionRun,
    IdempotencyRecord,
    Memory,
    MemoryRevision,
    Message,
    Thread,
)
from memories.services.erasure import subject_erase
from tests.factories import make_agent

FACT = "Alice is allergic to peanuts"


def store(client, **body):
    response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["memory_id"]


def ingest(agent, thread_id, n, subject):
    thread_messages_add(
        principal=Principal(tenant=agent.tenant, agent=agent),
        thread_id=thread_id,
        data={
            "messages": [{"role": "user", "content": f"{subject} line {i}"} for i in range(n)],
            "subject_id": subject,
            "extract": "off",
        },
    )
    return Thread.objects.get(agent=agent, thread_id=thread_id, subject_id=subject)


@pytest.fixture
def world(tenant, other_tenant, agent, key_client, settings):
    """Subject u1 in two agents of acme (memories, threads, a run); u2 and subject-less data in
    acme; u1 in globex too."""
    settings.MEMORYHUB_LLM_URL = ""
    other_agent = make_agent(tenant, "other-bot")
    mine, theirs = key_client(agent), key_client(other_agent)
    foreign_agent = make_agent(other_tenant, "support-bot")
    ids = {
        "u1": [
            store(mine, text=FACT, subject_id="u1", key="allergy"),
            store(mine, text="Alice likes jazz", subject_id="u1"),
            store(theirs, text="Alice ordered twice", subject_id="u1"),
            store(mine, text="Alice's team", subject_id="u1", category="workspace"),
        ],
        "u2": [store(mine, text="Bob likes tea", subject_id="u2")],
        "none": [store(mine, text="The office opens at 9")],
        "globex": [store(key_client(foreign_agent), text=FACT, subject_id="u1")],
    }
    threads = {
        "u1": [ingest(agent, "t-1", 3, "u1"), ingest(other_agent, "t-2", 2, "u1")],
        "u2": [ingest(agent, "t-1", 1, "u2")],
        "globex": [ingest(foreign_agent, "t-1", 4, "u1")],
    }
    run_request(thread=threads["u1"][0], trigger="extract")
    return ids, threads


def untouched(ids, threads):
    for memory_id in ids:
        memory = Memory.objects.get(pk=memory_id)
        assert (memory.status, memory.purged_at, memory.version) == ("active", None, 1)
        assert memory.text
    for thread in threads:
        assert Message.objects.filter(thread=thread).count() == thread.message_count > 0


@pytest.mark.django_db
def test_purge_erases_the_subject_across_the_tenants_agents_and_nothing_else(
    key_client, agent, world
):
    ids, threads = world
    # A stored response that carries the memory goes with it (the purge path's rule).
    admin = key_client(agent, scopes=["read", "write", "admin"])
    replayable = admin.post(
        "/api/v1/memories",
        {"text": "Alice lives in Porto", "subject_id": "u1"},
        format="json",
        HTTP_IDEMPOTENCY_KEY="k1",
    ).json()["memory_id"]
    ids["u1"].append(replayable)
    # A memory retention deleted already: its history (content included) outlives it.
    gone = store(key_client(agent), text="Alice's old address", subject_id="u1")
    Memory.objects.filter(pk=gone).delete()
    assert "old address" in str(list(MemoryRevision.objects.filter(memory_id=gone).values()))

    response = admin.delete("/api/v1/subjects/u1?purge=true")

    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "subject_id": "u1",
        "memories": 5,
        "threads": 2,
        "messages": 5,
        "purged": True,
    }
    for memory in Memory.objects.filter(pk__in=ids["u1"]):
        assert memory.purged_at is not None
        assert (memory.status, memory.text, memory.data, memory.key) == (
            "tombstoned",
            "",
            None,
            None,
        )
        assert memory.embedding is None
    history = str(list(MemoryRevision.objects.filter(memory_id__in=[*ids["u1"], gone]).values()))
    assert "Alice" not in history and "peanuts" not in history
    others = str(list(MemoryRevision.objects.exclude(memory_id__in=[*ids["u1"], gone]).values()))
    assert "Bob likes tea" in others and FACT in others  # u2's, and globex's u1
    digest = key_digest(agent.tenant_id, "k1")
    assert not IdempotencyRecord.objects.filter(key_digest=digest).exists()
    assert not Thread.objects.filter(pk__in=[t.pk for t in threads["u1"]]).exists()
    assert not Message.objects.filter(thread_id__in=[t.pk for t in threads["u1"]]).exists()
    assert not ExtractionRun.objects.exists()
    untouched(ids["u2"] + ids["none"] + ids["globex"], threads["u2"] + threads["globex"])
    # Again: nothing left to erase.
    assert admin.delete("/api/v1/subjects/u1?purge=true").json() == {
        "ok": True,
        "subject_id": "u1",
        "memories": 0,
        "threads": 0,
        "messages": 0,
        "purged": True,
    }


@pytest.mark.django_db
def test_without_purge_memories_are_tombstoned_and_messages_deleted(key_client, agent, world):
    ids, threads = world
    admin = key_client(agent, scopes=["read", "write", "admin"])

    response = admin.delete("/api/v1/subjects/u1")

    assert response.json() == {
        "ok": True,
        "subject_id": "u1",
        "memories": 4,
        "threads": 2,
        "messages": 5,
        "purged": False,
    }
    for memory in Memory.objects.filter(pk__in=ids["u1"]):
        assert (memory.status, memory.tombstone_reason) == ("tombstoned", "subject erasure")
        assert memory.purged_at is None and memory.text  # restorable by an operator
    for thread in Thread.objects.filter(pk__in=[t.pk for t in threads["u1"]]):
        assert (thread.message_count, thread.summary, thread.pending_messages) == (0, "", 0)
        assert thread.last_seq > 0  # seqs go on from where they were
    assert not Message.objects.filter(thread__subject_id="u1", tenant=agent.tenant).exists()
    # The run queued on one of them will apply nothing.
    run = ExtractionRun.objects.get()
    assert (run.state, run.error_class) == ("failed", "SubjectErased")
    assert run_execute(run.pk) is None
    untouched(ids["u2"] + ids["none"] + ids["globex"], threads["u2"] + threads["globex"])
    # The memories are tombstoned already; a purge now erases them.
    again = admin.delete("/api/v1/subjects/u1?purge=true").json()
    assert (again["memories"], again["threads"], again["messages"]) == (4, 2, 0)


@pytest.mark.django_db
def test_erasure_needs_the_admin_scope_and_a_bound_key_erases_only_its_subject(
    key_client, agent, world
):
    ids, threads = world
    for scopes in (["read"], ["read", "write"]):
        client = key_client(agent, scopes=scopes)
        for url in ("/api/v1/subjects/u1", "/api/v1/subjects/u1?purge=true"):
            response = client.delete(url)
            assert response.status_code == 403
            assert response.json() == {
                "ok": False,
                "error": {
                    "code": "SCOPE_DENIED",
                    "message": "This key lacks the 'admin' scope",
                    "details": {"scope": "admin"},
                },
            }
    bound = key_client(agent, scopes=["read", "write", "admin"], subject_id="u2")
    denied = bound.delete("/api/v1/subjects/u1?purge=true")
    assert denied.status_code == 403
    assert denied.json()["error"]["details"] == {"field": "subject_id"}
    untouched(ids["u1"], threads["u1"])
    assert bound.delete("/api/v1/subjects/u2?purge=true").json()["memories"] == 1


@pytest.mark.django_db
def test_bad_purge_value_and_an_unknown_subject(key_client, agent):
    admin = key_client(agent, scopes=["admin"])
    bad = admin.delete("/api/v1/subjects/u1?purge=maybe")
    assert bad.status_code == 400
    assert bad.json()["error"]["details"] == {"field": "purge"}
    assert admin.delete("/api/v1/subjects/nobody").json() == {
        "ok": True,
        "subject_id": "nobody",
        "memories": 0,
        "threads": 0,
        "messages": 0,
        "purged": False,
    }


@pytest.mark.django_db
def test_erasure_works_in_bounded_batches(tenant, agent, settings):
    settings.MEMORYHUB_LLM_URL = ""
    principal = Principal(tenant=tenant, agent=agent, scopes=frozenset({"admin"}))
    thread = ingest(agent, "long", 7, "u1")
    for i in range(5):
        Memory.objects.create(
            tenant=tenant, agent=agent, created_by="test", text=f"fact {i}", subject_id="u1"
        )
    result = subject_erase(principal=principal, subject_id="u1", purge=True, batch_size=2)
    assert (result.memories, result.threads, result.messages) == (5, 1, 7)
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert Memory.objects.filter(subject_id="u1", purged_at__isnull=True).count() == 0

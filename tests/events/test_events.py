"""Events (docs/operations.md#events): one per change, written in the change's transaction, on every
write path."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.core.checks import run_checks
from django.db import transaction

from accounts.principal import Principal
from memories.events import feed
from memories.events.record import events_insert
from memories.formation.thread_actions import thread_end
from memories.jobs.prune import prune_memories
from memories.jobs.retention_purge import purge_retention
from memories.jsonl import memory_to_record
from memories.models import Event, Memory
from memories.services import erasure
from memories.services.changes import memory_confirm, memory_update
from memories.services.jsonl_import import jsonl_import
from memories.services.lifecycle import memory_forget
from memories.services.operator_actions import (
    memory_approve,
    memory_correct,
    memory_merge,
    memory_restore,
    memory_tombstone,
)
from memories.services.store import memory_store
from tests.factories import make_agent, make_tenant

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
OPERATOR = "operator:owner@acme.test"


@pytest.fixture
def principal(tenant, agent):
    return Principal(tenant=tenant, agent=agent, scopes=frozenset({"read", "write", "admin"}))


def store(principal, minutes=0, **data):
    data.setdefault("dedup_policy", "insert")
    data.setdefault("text", "The customer prefers email")
    return memory_store(principal=principal, data=data, now=T0 + timedelta(minutes=minutes)).memory


def events(**filters):
    feed.sequence()
    return list(Event.objects.filter(**filters).order_by("position"))


def kinds(**filters):
    return [(e.type, e.memory_id, e.version) for e in events(**filters)]


@pytest.mark.django_db
def test_every_agent_and_operator_change_writes_its_events_in_order(principal, tenant, agent):
    m = store(principal, 0, key="contact")
    memory_update(principal=principal, memory_id=m.pk, data={"text": "Prefers phone"}, now=T0)
    memory_confirm(principal=principal, memory_id=m.pk, now=T0)
    p = store(principal, 1, text="Maybe likes tea", capture_mode="inferred")
    memory_approve(tenant=tenant, memory_id=p.pk, actor=OPERATOR, now=T0)
    memory_correct(
        tenant=tenant,
        memory_id=p.pk,
        actor=OPERATOR,
        changes={"text": "Likes green tea"},
        expected_version=2,
        now=T0,
    )
    memory_tombstone(tenant=tenant, memory_id=m.pk, actor=OPERATOR, reason="wrong", now=T0)
    memory_restore(tenant=tenant, memory_id=m.pk, actor=OPERATOR, now=T0)
    memory_forget(principal=principal, memory_id=m.pk, reason="stale", now=T0)
    memory_forget(principal=principal, memory_id=p.pk, purge=True, now=T0)

    assert kinds() == [
        ("memory.created", m.pk, 1),
        ("memory.updated", m.pk, 2),
        ("memory.updated", m.pk, 3),
        ("memory.created", p.pk, 1),
        ("review.pending", p.pk, 1),
        ("memory.updated", p.pk, 2),
        ("review.resolved", p.pk, 2),
        ("memory.updated", p.pk, 3),
        ("memory.forgotten", m.pk, 4),
        ("memory.updated", m.pk, 5),
        ("memory.forgotten", m.pk, 6),
        ("memory.purged", p.pk, 4),
    ]
    first = events()[0]
    assert (first.tenant_id, first.agent_id, first.subject_id, first.occurred_at) == (
        tenant.pk,
        agent.pk,
        None,
        T0,
    )
    assert first.data["id"] == m.pk and first.data["version"] == 1
    assert first.data["text"] == "The customer prefers email"
    positions = [e.position for e in events()]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


@pytest.mark.django_db
def test_merge_eviction_and_thread_end_write_their_events(principal, agent, tenant):
    keep, other = store(principal, 0, text="a"), store(principal, 1, text="b")
    memory_merge(tenant=tenant, keep_id=keep.pk, merge_ids=[other.pk], actor=OPERATOR, now=T0)
    chat = store(principal, 2, text="hi", category="conversation", thread_id="t1")
    thread_end(principal=principal, thread_id="t1", now=T0)
    agent.entry_cap = 1
    agent.save()
    newest = store(principal, 3, text="c")

    assert kinds(type__in=["memory.forgotten", "memory.expired", "memory.evicted"]) == [
        ("memory.forgotten", other.pk, 2),
        ("memory.expired", chat.pk, 2),
        ("memory.evicted", keep.pk, 3),  # the merge changed it too
    ]
    assert kinds(memory_id=newest.pk) == [("memory.created", newest.pk, 1)]


@pytest.mark.django_db
def test_a_rolled_back_change_leaves_no_event(principal):
    def store_then_fail():
        with transaction.atomic():
            store(principal)
            raise RuntimeError("the change fails after its write")

    with pytest.raises(RuntimeError, match="the change fails after its write"):
        store_then_fail()
    assert Memory.objects.count() == 0
    assert Event.objects.count() == 0


@pytest.mark.django_db
def test_a_purge_erases_the_content_from_the_memory_and_its_earlier_events(principal):
    m = store(principal, 0, key="ssn-note", text="Her passport number is X1234", tags=["id"])
    memory_update(principal=principal, memory_id=m.pk, data={"text": "Passport X9999"}, now=T0)
    memory_forget(principal=principal, memory_id=m.pk, purge=True, now=T0)

    rows = events(memory_id=m.pk)
    assert [e.type for e in rows] == ["memory.created", "memory.updated", "memory.purged"]
    for event in rows:
        text = json.dumps(event.data)
        assert "X1234" not in text and "X9999" not in text and "passport" not in text.lower()
        assert event.data["text"] == "" and event.data["key"] is None
        assert event.data["tags"] == [] and event.data["data"] is None
    assert rows[-1].data["status"] == "tombstoned"


@pytest.mark.django_db
def test_prune_and_retention_write_events_in_their_sql(principal, tenant):
    pending = store(principal, 0, text="unsure", capture_mode="inferred", ttl="1h")
    daily = store(principal, 0, text="standup at nine", category="daily")
    later = T0 + timedelta(days=4)
    prune_memories(now=later)

    expired = events(type__in=["memory.expired", "review.resolved"])
    assert [(e.type, e.memory_id, e.version) for e in expired] == [
        ("memory.expired", pending.pk, 2),
        ("review.resolved", pending.pk, 2),
        ("memory.expired", daily.pk, 2),
    ] or [(e.type, e.memory_id, e.version) for e in expired] == [
        ("memory.expired", daily.pk, 2),
        ("memory.expired", pending.pk, 2),
        ("review.resolved", pending.pk, 2),
    ]
    # The SQL writes the object `memory_json` writes.
    from memories.serialization import memory_json

    fresh = Memory.objects.select_related("agent").get(pk=daily.pk)
    (sql_event,) = events(type="memory.expired", memory_id=daily.pk)
    assert sql_event.data == memory_json(fresh, agent=fresh.agent)
    assert sql_event.occurred_at == later

    purge_retention(now=later + timedelta(days=31), days=30)
    (gone,) = events(type="memory.purged", memory_id=daily.pk)
    assert gone.version == 3 and gone.data["version"] == 3
    assert gone.data["text"] == "" and "standup" not in json.dumps(gone.data)
    assert not Memory.objects.filter(pk=daily.pk).exists()


@pytest.mark.django_db
def test_import_erasure_and_extraction_write_events(principal, tenant, agent):
    # A backup line of another tenant's memory, imported here under a new id.
    other = make_agent(make_tenant("globex"), agent.slug)
    source = store(Principal(tenant=other.tenant, agent=other), 0, subject_id="cust-1")
    line = {**memory_to_record(source), "id": "mem_01J0000000000000000000000A"}
    jsonl_import(tenant=tenant, lines=[json.dumps(line)], actor=OPERATOR)
    assert kinds(memory_id=line["id"]) == [("memory.created", line["id"], 1)]

    erasure.subject_erase(principal=principal, subject_id="cust-1", purge=True, now=T0)
    (erased,) = events(type="subject.erased")
    assert (erased.subject_id, erased.agent_id, erased.category) == ("cust-1", None, "workspace")
    assert erased.data == {
        "subject_id": "cust-1",
        "purged": True,
        "memories": 1,
        "threads": 0,
        "messages": 0,
    }
    assert [e.type for e in events(memory_id=line["id"])] == ["memory.created", "memory.purged"]


@pytest.mark.django_db
def test_events_insert_writes_the_rows_bulk_create_writes(tenant, agent):
    """The written-out INSERT is held equal to the ORM's (memories/compiled.py's rule)."""
    fields = {
        "tenant_id": tenant.pk,
        "type": "memory.updated",
        "agent_id": agent.pk,
        "category": "core",
        "subject_id": "s-1",
        "scope": "user",
        "memory_id": "mem_x",
        "version": 3,
        "occurred_at": T0,
        "data": {"text": "ünïcode ✓", "n": [1, 2.5, None], "nested": {"a": True}},
    }
    events_insert([Event(**fields)])
    Event.objects.bulk_create([Event(**fields)])
    ours, orms = Event.objects.order_by("id")
    columns = [f.attname for f in Event._meta.concrete_fields if f.attname != "id"]
    assert [getattr(ours, c) for c in columns] == [getattr(orms, c) for c in columns]


@pytest.mark.django_db
def test_workspace_and_shared_memories_carry_their_owner(principal, tenant, agent):
    helper = make_agent(tenant, "helper")
    workspace = store(principal, 0, category="workspace", text="Office closes at six")
    theirs = store(Principal(tenant=tenant, agent=helper), 1, text="helper's fact")
    by_memory = {e.memory_id: e for e in events(type="memory.created")}
    assert (by_memory[workspace.pk].agent_id, by_memory[workspace.pk].category) == (
        None,
        "workspace",
    )
    assert by_memory[theirs.pk].agent_id == helper.pk


@pytest.mark.django_db
def test_every_writer_records_a_user_memorys_scope(principal, tenant, agent, settings):
    """The services (Python), prune and retention (their SQL), imports and erasure all write a
    user memory's events with `scope` user, and the public object they hold says `source` user."""
    settings.MEMORYHUB_EVENT_RETENTION_DAYS = 365  # keep every event to look at
    user = {"scope": "user", "subject_id": "ann"}
    daily = store(principal, 0, text="Ann's standup at nine", category="daily", **user)
    pending = store(
        principal, 0, text="Ann may like tea", capture_mode="inferred", ttl="1h", **user
    )
    kept = store(principal, 0, text="Ann is vegan", key="diet", **user)
    own = store(principal, 0, text="The agent's own note about Ann", subject_id="ann")
    memory_update(
        principal=principal, memory_id=kept.pk, subject_id="ann", data={"text": "Ann: vegan"}
    )
    later = T0 + timedelta(days=4)
    prune_memories(now=later)  # the SQL path: daily and pending expire
    purge_retention(now=later + timedelta(days=31), days=30)  # ... and are deleted

    line = {**memory_to_record(kept), "id": "mem_01J0000000000000000000000B", "key": "diet-2"}
    jsonl_import(tenant=tenant, lines=[json.dumps(line)], actor=OPERATOR)
    erasure.subject_erase(principal=principal, subject_id="ann", purge=True, now=later)

    by_memory = {}
    for event in events(memory_id__isnull=False):
        by_memory.setdefault(event.memory_id, []).append((event.type, event.scope))
    assert by_memory[daily.pk] == [
        ("memory.created", "user"),
        ("memory.expired", "user"),
        ("memory.purged", "user"),
    ]
    assert by_memory[pending.pk] == [
        ("memory.created", "user"),
        ("review.pending", "user"),
        ("memory.expired", "user"),
        ("review.resolved", "user"),
        ("memory.purged", "user"),
    ]
    assert by_memory[kept.pk] == [
        ("memory.created", "user"),
        ("memory.updated", "user"),
        ("memory.purged", "user"),  # the erasure
    ]
    assert by_memory[line["id"]] == [("memory.created", "user"), ("memory.purged", "user")]
    assert by_memory[own.pk] == [("memory.created", "agent"), ("memory.purged", "agent")]
    for event in events(memory_id__isnull=False, scope="user"):
        assert (event.agent_id, event.subject_id) == (None, "ann")
        assert (event.data["scope"], event.data["source"]) == ("user", "user")
    # The erasure itself is the tenant's event (workspace, no agent), not a memory's.
    (erased,) = events(type="subject.erased")
    assert (erased.scope, erased.agent_id, erased.subject_id) == ("agent", None, "ann")


@pytest.mark.django_db
def test_the_bench_switch_stops_request_writes_from_recording_events(principal, settings):
    store(principal, 0, key="before")
    assert [e.type for e in events()] == ["memory.created"]
    assert not [w for w in run_checks() if w.id == "memoryhub.W001"]

    settings.MEMORYHUB_BENCH_NO_EVENTS = True  # `bench --load --pair observability`'s "off"
    m = store(principal, 1, key="during")
    memory_forget(principal=principal, memory_id=m.pk, reason="stale", now=T0)
    assert [e.type for e in events()] == ["memory.created"]  # nothing recorded meanwhile
    warnings = [w for w in run_checks() if w.id == "memoryhub.W001"]
    assert len(warnings) == 1 and "MEMORYHUB_BENCH_NO_EVENTS" in warnings[0].msg

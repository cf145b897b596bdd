"""Service-level rules: entry-cap eviction and the operator actions of the console."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.principal import Principal
from memories import idempotency
from memories.formation.thread_actions import thread_end
from memories.models import Memory, MemoryRevision
from memories.responses import store_response
from memories.selectors import memory_get
from memories.services.eviction import memory_evict_over_cap
from memories.services.operator_actions import (
    memory_add_tag,
    memory_approve,
    memory_bulk_tombstone,
    memory_correct,
    memory_merge,
    memory_purge,
    memory_restore,
    memory_tombstone,
)
from memories.services.store import memory_store, memory_store_prepare, memory_store_write
from memories.tasks import run_job
from memoryhub.errors import Conflict, InvalidInput, NotFound, SecretRejected
from tests.factories import make_agent

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
OPERATOR = "operator:owner@acme.test"


@pytest.fixture
def principal(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


def store(principal, minutes, **data):
    data.setdefault("dedup_policy", "insert")
    return memory_store(principal=principal, data=data, now=T0 + timedelta(minutes=minutes)).memory


def statuses(*memories):
    rows = dict(Memory.objects.values_list("id", "status"))
    return [rows[m.id] for m in memories]


@pytest.mark.django_db
def test_cap_evicts_coldest_non_core_then_core(principal, agent):
    agent.entry_cap = 3
    agent.save()
    core = store(principal, 0, text="core fact", category="core")
    daily = store(principal, 1, text="daily note", category="daily")
    custom = store(principal, 2, text="custom note", category="projects")
    fourth = store(principal, 3, text="fourth", category="core")
    # The coldest non-core memory goes, although the core one is older.
    assert statuses(core, daily, custom, fourth) == ["active", "evicted", "active", "active"]
    evict = MemoryRevision.objects.get(memory_id=daily.id, change_type="evict")
    assert (evict.actor, evict.reason) == ("system:cap", "entry cap of 3 reached")

    # The custom memory is the only non-core one left, so it goes next, before any core one.
    memory_store(
        principal=principal,
        data={"text": "fifth", "category": "core"},
        now=T0 + timedelta(minutes=4),
    )
    assert statuses(custom) == ["evicted"]
    # Only core memories now: the coldest core memory goes.
    store(principal, 5, text="sixth", category="core")
    assert statuses(core) == ["evicted"]
    assert Memory.objects.filter(status="active").count() == 3


@pytest.mark.django_db
def test_cap_prefers_least_recently_accessed(principal, agent):
    agent.entry_cap = 2
    agent.save()
    older = store(principal, 0, text="older", category="daily")
    newer = store(principal, 1, text="newer", category="daily")
    memory_get(principal=principal, memory_id=older.id, now=T0 + timedelta(minutes=2))
    store(principal, 3, text="third", category="daily")
    assert statuses(older, newer) == ["active", "evicted"]


@pytest.mark.django_db
def test_workspace_memories_count_against_the_tenant_cap(principal, tenant, agent):
    tenant.workspace_cap = 1
    tenant.save()
    first = store(principal, 0, text="ws one", category="workspace")
    own = store(principal, 1, text="own")
    store(principal, 2, text="ws two", category="workspace")
    assert statuses(first, own) == ["evicted", "active"]
    assert memory_evict_over_cap(tenant=tenant, agent=None, now=T0) == 0


@pytest.mark.django_db
def test_evict_over_cap_after_lowering_the_cap(principal, tenant, agent):
    memories = [store(principal, i, text=f"fact {i}", category="daily") for i in range(4)]
    agent.entry_cap = 2
    agent.save()
    assert memory_evict_over_cap(tenant=tenant, agent=agent, now=T0 + timedelta(hours=1)) == 2
    assert statuses(*memories) == ["evicted", "evicted", "active", "active"]


@pytest.mark.django_db
def test_operator_correction_is_compare_and_set(principal, tenant):
    memory = store(principal, 0, text="Lives in Paris")
    corrected = memory_correct(
        tenant=tenant,
        memory_id=memory.id,
        actor=OPERATOR,
        changes={"text": "Lives in Lyon", "key": "home"},
        expected_version=1,
    )
    assert (corrected.text, corrected.key, corrected.version) == ("Lives in Lyon", "home", 2)
    revision = MemoryRevision.objects.filter(memory_id=memory.id).latest("id")
    assert (revision.change_type, revision.actor) == ("correct", OPERATOR)
    with pytest.raises(Conflict) as exc:
        memory_correct(
            tenant=tenant,
            memory_id=memory.id,
            actor=OPERATOR,
            changes={"text": "stale edit"},
            expected_version=1,
        )
    assert exc.value.details == {"current_version": 2}
    with pytest.raises(SecretRejected):
        memory_correct(
            tenant=tenant,
            memory_id=memory.id,
            actor=OPERATOR,
            changes={"text": "AKIA" + "IOSFODNN7EXAMPLQ"},
            expected_version=2,
        )


@pytest.mark.django_db
def test_operator_actions_stay_in_their_tenant(principal, other_tenant):
    memory = store(principal, 0, text="x")
    for action in (memory_tombstone, memory_approve, memory_purge):
        with pytest.raises(NotFound):
            action(tenant=other_tenant, memory_id=memory.id, actor=OPERATOR)
    assert Memory.objects.get().version == 1


@pytest.mark.django_db
def test_bulk_tombstone_is_all_or_none(principal, tenant, other_tenant):
    a, b = store(principal, 0, text="alpha fact"), store(principal, 1, text="bravo fact")
    foreign = store(Principal(tenant=other_tenant, agent=make_agent(other_tenant)), 2, text="c")
    with pytest.raises(NotFound):
        memory_bulk_tombstone(
            tenant=tenant, memory_ids=[a.id, foreign.id], actor=OPERATOR, reason="clean"
        )
    assert set(Memory.objects.values_list("status", flat=True)) == {"active"}
    count = memory_bulk_tombstone(
        tenant=tenant, memory_ids=[a.id, b.id, a.id], actor=OPERATOR, reason="clean"
    )
    assert count == 2
    assert list(
        Memory.objects.filter(tenant=tenant).values_list("status", "tombstone_reason").distinct()
    ) == [("tombstoned", "clean")]


@pytest.mark.django_db
def test_tombstone_restore_approve(principal, tenant):
    memory = store(principal, 0, text="Inferred fact", capture_mode="inferred", key="k")
    assert memory.review_state == "pending"
    approved = memory_approve(tenant=tenant, memory_id=memory.id, actor=OPERATOR, now=T0)
    assert (approved.review_state, approved.last_confirmed_at) == ("approved", T0)
    memory_tombstone(tenant=tenant, memory_id=memory.id, actor=OPERATOR, reason="dup")
    replacement = store(principal, 1, text="replacement", key="k")
    with pytest.raises(Conflict):
        memory_restore(tenant=tenant, memory_id=memory.id, actor=OPERATOR)
    memory_tombstone(tenant=tenant, memory_id=replacement.id, actor=OPERATOR)
    restored = memory_restore(tenant=tenant, memory_id=memory.id, actor=OPERATOR)
    assert (restored.status, restored.tombstone_reason) == ("active", "")
    types = list(
        MemoryRevision.objects.filter(memory_id=memory.id)
        .order_by("id")
        .values_list("change_type", flat=True)
    )
    assert types == ["create", "approve", "tombstone", "restore"]
    memory_purge(tenant=tenant, memory_id=memory.id, actor=OPERATOR)
    with pytest.raises(InvalidInput):
        memory_restore(tenant=tenant, memory_id=memory.id, actor=OPERATOR)


@pytest.mark.django_db
def test_restore_evicts_down_to_the_cap_but_never_the_restored_memory(principal, tenant, agent):
    agent.entry_cap = 2
    agent.save()
    # `back` is the coldest memory (read last at minute 0): left to the eviction order alone,
    # the restore would evict it again at once.
    back = store(principal, 0, text="comes back", category="daily")
    memory_tombstone(tenant=tenant, memory_id=back.id, actor=OPERATOR, now=T0)
    colder, warmer = (store(principal, m, text=f"fact {m}", category="daily") for m in (1, 2))
    restore_at = T0 + timedelta(minutes=10)
    memory_restore(tenant=tenant, memory_id=back.id, actor=OPERATOR, now=restore_at)
    assert statuses(back, colder, warmer) == ["active", "evicted", "active"]
    evict = MemoryRevision.objects.get(memory_id=colder.id, change_type="evict")
    assert (evict.actor, evict.reason, evict.created_at) == (
        "system:cap",
        "entry cap of 2 reached",
        restore_at,
    )
    assert Memory.objects.filter(agent=agent, status="active").count() == 2

    # The workspace memories against the tenant's cap, the same way.
    tenant.workspace_cap = 1
    tenant.save()
    shared = store(principal, 3, text="team fact", category="workspace")
    memory_tombstone(
        tenant=tenant, memory_id=shared.id, actor=OPERATOR, now=T0 + timedelta(minutes=3)
    )
    other = store(principal, 4, text="other team fact", category="workspace")
    memory_restore(tenant=tenant, memory_id=shared.id, actor=OPERATOR, now=restore_at)
    assert statuses(shared, other, back, warmer) == ["active", "evicted", "active", "active"]


@pytest.mark.django_db
def test_restore_clears_an_expiry_already_past_and_keeps_one_still_ahead(principal, tenant):
    lapsed = store(principal, 0, text="lapsed fact", expires_at="2026-05-01T10:00:00Z")
    pending = store(principal, 0, text="pending fact", expires_at="2026-05-03T10:00:00Z")
    later = T0 + timedelta(days=1)
    run_job("prune_memories", trigger="manual", now=later)
    memory_tombstone(tenant=tenant, memory_id=pending.id, actor=OPERATOR, now=later)
    assert statuses(lapsed, pending) == ["expired", "tombstoned"]
    for memory in (lapsed, pending):
        memory_restore(tenant=tenant, memory_id=memory.id, actor=OPERATOR, now=later)
    assert statuses(lapsed, pending) == ["active", "active"]
    restored = {m.id: m.expires_at for m in Memory.objects.all()}
    assert restored == {lapsed.id: None, pending.id: datetime(2026, 5, 3, 10, tzinfo=UTC)}
    # Live again: an agent reads it (a past expiry kept would hide it from every read).
    assert memory_get(principal=principal, memory_id=lapsed.id, now=later).text == "lapsed fact"
    revision = MemoryRevision.objects.filter(memory_id=lapsed.id).latest("id")
    assert (revision.change_type, revision.actor) == ("restore", OPERATOR)


@pytest.mark.django_db
def test_merge_and_add_tag(principal, tenant):
    keep = store(principal, 0, text="Colby lives in LA")
    dup1 = store(principal, 1, text="Colby lives in Los Angeles")
    dup2 = store(principal, 2, text="Colby is in LA")
    result = memory_merge(
        tenant=tenant, keep_id=keep.id, merge_ids=[dup1.id, dup2.id, keep.id], actor=OPERATOR
    )
    assert result.id == keep.id
    assert statuses(keep, dup1, dup2) == ["active", "tombstoned", "tombstoned"]
    merged = Memory.objects.get(pk=dup1.id)
    assert merged.tombstone_reason == f"merged into {keep.id}"
    assert MemoryRevision.objects.get(memory_id=dup1.id, change_type="merge")

    changed = memory_add_tag(
        tenant=tenant, memory_ids=[keep.id, dup1.id, keep.id], tag=" Family Facts", actor=OPERATOR
    )
    assert changed == 2
    assert Memory.objects.get(pk=keep.id).tags == ["family-facts"]
    assert (
        memory_add_tag(tenant=tenant, memory_ids=[keep.id], tag="family-facts", actor=OPERATOR) == 0
    )


@pytest.mark.django_db
def test_store_result_replays_under_idempotency(principal):
    data = {"text": "same"}

    def post():
        return idempotency.respond(
            principal=principal,
            operation="store",
            payload=data,
            key="abc",
            prepare=lambda: memory_store_prepare(principal=principal, data=data),
            action=lambda prepared: store_response(
                memory_store_write(prepared=prepared), agent=principal.agent
            ),
        )

    first = post()
    second = post()
    assert second.replayed and second.body == first.body
    assert second.status == 201 and second.body["memory_id"] == first.body["memory_id"]


@pytest.mark.django_db
def test_seed_demo_shows_each_concept_once_and_prints_the_key_to_export():
    from io import StringIO

    from django.core.management import call_command

    from accounts.models import Agent
    from memories.models import Thread
    from memories.retrieval.hydrate import memory_hydrate

    first, second = StringIO(), StringIO()
    call_command("seed_demo", stdout=first)
    call_command("seed_demo", stdout=second)
    exported = [
        line for line in first.getvalue().splitlines() if "export MEMORYHUB_KEY=mh_" in line
    ]
    assert len(exported) == 1 and "export MEMORYHUB_KEY" not in second.getvalue()
    rows = Memory.objects.filter(tenant__slug="demo")
    assert rows.count() == 7
    assert set(rows.values_list("category", flat=True)) == {"core", "workspace", "daily"}
    # One memory waits for review, and says why; its agent was not sure of it.
    pending = rows.get(review_state="pending")
    assert (pending.review_reason, pending.capture_mode) == ("inferred", "inferred")
    assert pending.confidence < 1 and pending.subject_id == "alice"
    # No subject-less memory is about a person: alice's context holds alice's facts, the
    # agent's own policy and the workspace's, and nothing of bob's.
    agent = Agent.objects.get(tenant__slug="demo", slug="demo-agent")
    principal = Principal(tenant=agent.tenant, agent=agent)
    texts = [
        e["text"]
        for e in memory_hydrate(principal=principal, data={"subject_id": "alice"})["entries"]
    ]
    assert "Alice prefers answers in French." in texts and "Alice is allergic to peanuts." in texts
    assert "Release freeze starts every Thursday at 18:00 UTC." in texts
    assert not [t for t in texts if "Bob" in t]
    assert all(
        "alice" not in text.lower()
        for text in rows.filter(subject_id__isnull=True).values_list("text", flat=True)
    )
    thread = Thread.objects.get(tenant__slug="demo", thread_id="support-42")
    assert (thread.subject_id, thread.message_count) == ("alice", 4)


def _counter_matches_table():
    from django.db.models import Count

    from memories.models import OwnerCount

    kept = {
        (t, o): n
        for t, o, n in OwnerCount.objects.values_list("tenant_id", "owner_id", "active")
        if n
    }
    actual = {
        (row["tenant_id"], row["agent_id"] or 0): row["n"]
        for row in Memory.objects.filter(status="active")
        .values("tenant_id", "agent_id")
        .annotate(n=Count("id"))
    }
    assert kept == actual


@pytest.mark.django_db
def test_owner_counts_follow_every_kind_of_write(principal, tenant, agent):
    a = store(principal, 0, text="one")
    store(principal, 1, text="two", category="workspace")
    store(principal, 2, text="three", category="conversation", thread_id="t")
    _counter_matches_table()
    memory_tombstone(tenant=tenant, memory_id=a.id, actor=OPERATOR)
    _counter_matches_table()
    memory_restore(tenant=tenant, memory_id=a.id, actor=OPERATOR)
    thread_end(principal=principal, thread_id="t")
    _counter_matches_table()
    memory_purge(tenant=tenant, memory_id=a.id, actor=OPERATOR)
    _counter_matches_table()
    # Writes that bypass the services (bulk loads, jobs' SQL, hard deletes) are counted too.
    Memory.objects.bulk_create(
        [Memory(tenant=tenant, agent=agent, created_by="test", text=f"bulk {i}") for i in range(5)]
    )
    _counter_matches_table()
    Memory.objects.filter(text__startswith="bulk").exclude(text="bulk 0").update(status="expired")
    _counter_matches_table()
    Memory.objects.filter(text__startswith="bulk").delete()
    _counter_matches_table()
    # Reads change no status and write no counter row.
    Memory.objects.update(access_count=7)
    _counter_matches_table()

"""prune_memories: the age rules, caps, dry runs and the PruneRun record
(docs/operations.md#background-jobs)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from memories.jobs.prune import prune_memories
from memories.models import Memory, MemoryRevision, PruneRun
from tests.factories import make_agent
from tests.support.commands import last_json_line
from tests.support.jobs import NOW, add_memories, ago, prune_revisions

pytestmark = pytest.mark.django_db


def statuses(memories) -> list[str]:
    by_id = dict(Memory.objects.filter(pk__in=[m.pk for m in memories]).values_list("id", "status"))
    return [by_id[m.pk] for m in memories]


def test_memory_past_expires_at_is_marked_expired_with_one_revision(tenant, agent):
    (due,) = add_memories(tenant, agent, expires_at=ago(seconds=1), updated_at=ago(days=1))
    (at_now,) = add_memories(tenant, agent, expires_at=NOW)
    (future,) = add_memories(tenant, agent, expires_at=NOW + timedelta(seconds=1))

    counts = prune_memories(now=NOW)

    assert counts == {
        "expired": 2,
        "daily_pruned": 0,
        "conversation_ended": 0,
        "evicted": 0,
        "total": 2,
    }
    assert statuses([due, at_now, future]) == ["expired", "expired", "active"]
    due.refresh_from_db()
    assert due.version == 2
    assert due.status_changed_at == NOW
    assert due.updated_at == NOW
    revision = MemoryRevision.objects.get(memory_id=due.pk)
    assert (revision.actor, revision.change_type, revision.version) == ("system:prune", "expire", 2)
    assert revision.tenant_id == tenant.pk
    assert revision.reason == "past expires_at"
    assert revision.before == {"status": "active", "version": 1}
    assert revision.after == {"status": "expired", "version": 2}
    assert revision.created_at == NOW


def test_daily_is_pruned_72_hours_after_its_last_write(tenant, agent):
    (old,) = add_memories(tenant, agent, category="daily", updated_at=ago(hours=73))
    (young,) = add_memories(tenant, agent, category="daily", updated_at=ago(hours=71))
    # A read does not count as a write.
    (read,) = add_memories(
        tenant, agent, category="daily", updated_at=ago(hours=80), last_accessed_at=NOW
    )

    counts = prune_memories(now=NOW)

    assert counts["daily_pruned"] == 2
    assert statuses([old, young, read]) == ["expired", "active", "expired"]
    assert prune_revisions(memory_id=old.pk).get().reason == (
        "daily memory 72 h after its last write"
    )


def test_conversation_idle_24_hours_ends(tenant, agent):
    (idle,) = add_memories(tenant, agent, category="conversation", updated_at=ago(hours=25))
    (fresh,) = add_memories(tenant, agent, category="conversation", updated_at=ago(hours=23))

    counts = prune_memories(now=NOW)

    assert counts["conversation_ended"] == 1
    assert statuses([idle, fresh]) == ["expired", "active"]
    assert prune_revisions(memory_id=idle.pk).get().reason == "conversation idle 24 h"


def test_durable_categories_never_age_out(tenant, agent):
    year_ago = ago(days=365)
    durable = [
        *add_memories(tenant, agent, category="core", updated_at=year_ago),
        *add_memories(tenant, None, category="workspace", updated_at=year_ago),
        *add_memories(tenant, agent, category="archival", updated_at=year_ago),
        *add_memories(tenant, agent, category="recipes", updated_at=year_ago),
    ]

    assert prune_memories(now=NOW)["total"] == 0
    assert statuses(durable) == ["active"] * 4
    assert not prune_revisions().exists()


def test_a_memory_matching_several_rules_counts_once(tenant, agent):
    add_memories(tenant, agent, category="daily", updated_at=ago(days=5), expires_at=ago(days=1))

    counts = prune_memories(now=NOW)

    assert (counts["expired"], counts["daily_pruned"], counts["total"]) == (1, 0, 1)
    assert prune_revisions().count() == 1


def test_entry_cap_evicts_coldest_non_core_first(tenant):
    agent = make_agent(tenant, "capped", entry_cap=3)
    core = add_memories(tenant, agent, 2, category="core", last_accessed_at=ago(days=30))
    coldest = add_memories(tenant, agent, category="notes", last_accessed_at=ago(days=2))
    # Same last access: the older write goes first.
    older_write = add_memories(
        tenant, agent, category="notes", last_accessed_at=ago(days=1), updated_at=ago(days=3)
    )
    newer_write = add_memories(
        tenant, agent, category="notes", last_accessed_at=ago(days=1), updated_at=ago(days=2)
    )
    warm = add_memories(tenant, agent, category="notes", last_accessed_at=NOW)

    counts = prune_memories(now=NOW)

    assert counts["evicted"] == 3
    assert statuses(core + coldest + older_write + newer_write + warm) == [
        "active",
        "active",
        "evicted",
        "evicted",
        "evicted",
        "active",
    ]
    revision = prune_revisions(memory_id=coldest[0].pk).get()
    assert (revision.change_type, revision.reason) == ("evict", "entry cap of 3 reached")
    assert revision.after == {"status": "evicted", "version": 2}
    assert prune_memories(now=NOW)["evicted"] == 0  # idempotent


def test_core_is_evicted_only_when_no_non_core_remains(tenant):
    agent = make_agent(tenant, "all-core", entry_cap=2)
    oldest, middle, newest = (
        add_memories(tenant, agent, category="core", last_accessed_at=ago(days=d))[0]
        for d in (3, 2, 1)
    )

    assert prune_memories(now=NOW)["evicted"] == 1
    assert statuses([oldest, middle, newest]) == ["evicted", "active", "active"]


def test_cap_counts_what_survives_the_age_rules(tenant):
    agent = make_agent(tenant, "tidy", entry_cap=2)
    add_memories(tenant, agent, 2, category="daily", updated_at=ago(days=4))
    kept = add_memories(tenant, agent, 2, category="notes")

    counts = prune_memories(now=NOW)

    assert (counts["daily_pruned"], counts["evicted"]) == (2, 0)
    assert statuses(kept) == ["active", "active"]


def test_workspace_memories_count_against_the_tenant_cap(tenant, agent):
    tenant.workspace_cap = 2
    tenant.save()
    workspace = add_memories(tenant, None, 3, category="workspace", last_accessed_at=ago(days=1))
    add_memories(tenant, agent, 5)  # the agent's own memories do not count against it

    counts = prune_memories(now=NOW)

    assert counts["evicted"] == 1
    assert sorted(statuses(workspace)) == ["active", "active", "evicted"]
    assert prune_revisions().get().reason == "workspace cap of 2 reached"


def test_batches_walk_everything_and_write_one_revision_each(tenant, agent):
    add_memories(tenant, agent, 23, expires_at=ago(hours=1))
    add_memories(tenant, agent, 17, category="daily", updated_at=ago(days=4))
    capped = make_agent(tenant, "small", entry_cap=1)
    add_memories(tenant, capped, 12, category="notes")
    lines = []

    counts = prune_memories(now=NOW, batch_size=5, progress=lines.append)

    assert counts == {
        "expired": 23,
        "daily_pruned": 17,
        "conversation_ended": 0,
        "evicted": 11,
        "total": 51,
    }
    assert prune_revisions().count() == 51
    assert prune_revisions().values("memory_id").distinct().count() == 51
    assert sum("expired batch" in line for line in lines) == 5
    assert sum("evicted acme/small" in line for line in lines) == 3


def test_a_memory_written_while_pruning_runs_is_left_alone(tenant, agent):
    """Each batch re-evaluates the rules: a memory rewritten between batches is no longer due."""
    due = add_memories(tenant, agent, 6, category="daily", updated_at=ago(days=4))
    rewritten: list[str] = []

    def between_batches(line: str) -> None:
        if not rewritten:
            # An agent re-stores one of the still-due memories, and stores a new one.
            target = Memory.objects.filter(pk__in=[m.pk for m in due], status="active").first()
            Memory.objects.filter(pk=target.pk).update(updated_at=NOW, version=2)
            rewritten.append(target.pk)
            add_memories(tenant, agent, category="daily", updated_at=NOW)

    counts = prune_memories(now=NOW, batch_size=2, progress=between_batches)

    assert counts["daily_pruned"] == 5
    assert Memory.objects.get(pk=rewritten[0]).status == "active"
    assert Memory.objects.filter(status="active").count() == 2


def test_dry_run_changes_nothing_and_predicts_the_real_run(tenant, agent):
    add_memories(tenant, agent, 4, expires_at=ago(minutes=5))
    add_memories(tenant, agent, 3, category="daily", updated_at=ago(hours=100))
    add_memories(tenant, agent, 2, category="conversation", updated_at=ago(hours=30))
    capped = make_agent(tenant, "busy", entry_cap=5)
    add_memories(tenant, capped, 3, category="daily", updated_at=ago(hours=100))
    add_memories(tenant, capped, 9, category="notes")
    # Memories matching two rules count once, under the first (expiry), in both runs; an
    # expired one does not count against the cap either.
    add_memories(
        tenant, agent, category="daily", updated_at=ago(hours=100), expires_at=ago(hours=1)
    )
    add_memories(
        tenant, agent, category="conversation", updated_at=ago(hours=30), expires_at=ago(minutes=1)
    )
    add_memories(tenant, capped, category="daily", updated_at=ago(hours=90), expires_at=NOW)
    before = list(Memory.objects.order_by("id").values_list("id", "status", "version"))

    dry_out = StringIO()
    call_command("prune_memories", "--dry-run", "--now", NOW.isoformat(), stdout=dry_out)

    assert list(Memory.objects.order_by("id").values_list("id", "status", "version")) == before
    assert not MemoryRevision.objects.exists()
    assert "would evict 4 of acme/busy (9 live over entry_cap 5)" in dry_out.getvalue()
    dry_counts = last_json_line(dry_out.getvalue())
    assert dry_counts == {
        "expired": 7,
        "daily_pruned": 6,
        "conversation_ended": 2,
        "evicted": 4,
        "total": 19,
    }

    real_out = StringIO()
    call_command("prune_memories", "--now", NOW.isoformat(), stdout=real_out)
    assert last_json_line(real_out.getvalue()) == dry_counts
    assert prune_revisions().count() == 19

    dry, real = PruneRun.objects.order_by("started_at")
    assert (dry.dry_run, real.dry_run) == (True, False)
    assert dry.counts == real.counts == dry_counts
    assert (real.job, real.trigger, real.status, real.as_of) == (
        "prune_memories",
        "command",
        "ok",
        NOW,
    )
    assert real.duration_ms is not None and real.finished_at is not None


def test_now_option_evaluates_the_rules_at_that_time(tenant, agent):
    (daily,) = add_memories(tenant, agent, category="daily", updated_at=NOW)

    out = StringIO()
    call_command("prune_memories", "--now", (NOW + timedelta(hours=71)).isoformat(), stdout=out)
    assert last_json_line(out.getvalue())["daily_pruned"] == 0
    call_command("prune_memories", "--now", "2026-06-04T13:00:00Z", stdout=out)
    assert last_json_line(out.getvalue())["daily_pruned"] == 1
    daily.refresh_from_db()
    assert daily.status_changed_at == NOW + timedelta(hours=73)


def test_output_ends_with_one_json_line(tenant, agent):
    add_memories(tenant, agent, 3, expires_at=ago(hours=1))
    out = StringIO()
    call_command("prune_memories", "--now", NOW.isoformat(), "--batch-size", "2", stdout=out)
    lines = out.getvalue().strip().splitlines()
    assert lines[:2] == [
        "prune: expired batch 1: 2 changed (2 so far)",
        "prune: expired batch 2: 1 changed (3 so far)",
    ]
    assert last_json_line(out.getvalue())["total"] == 3


def test_cap_sweep_picks_the_same_victims_as_store_time_eviction(tenant):
    """The sweep and `services.memory_evict_over_cap` apply one rule to identical agents."""
    from memories.services.eviction import memory_evict_over_cap

    def populate(agent):
        for days, category in ((9, "core"), (8, "notes"), (7, "notes"), (6, "core"), (5, "notes")):
            add_memories(
                tenant, agent, category=category, last_accessed_at=ago(days=days), text=f"{days}"
            )

    by_service, by_sweep = (
        make_agent(tenant, "svc", entry_cap=1),
        make_agent(tenant, "job", entry_cap=1),
    )
    populate(by_service)
    populate(by_sweep)

    assert memory_evict_over_cap(tenant=tenant, agent=by_service, now=NOW) == 4
    assert prune_memories(now=NOW)["evicted"] == 4

    def evicted(agent):
        return sorted(
            Memory.objects.filter(agent=agent, status="evicted").values_list("text", flat=True)
        )

    assert evicted(by_sweep) == evicted(by_service) == ["5 0", "7 0", "8 0", "9 0"]

"""purge_retention: retired memories past retention are deleted, idempotency records past 24 h."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from accounts.principal import Principal
from memories.formation.ingest import thread_messages_add
from memories.jobs.retention_purge import purge_retention
from memories.models import (
    DailyReads,
    IdempotencyRecord,
    JobRun,
    Memory,
    MemoryRevision,
    Message,
    Thread,
)
from tests.factories import make_agent
from tests.support.commands import last_json_line
from tests.support.jobs import NOW, add_memories, ago

pytestmark = pytest.mark.django_db


def retire(memory, status: str, when):
    Memory.objects.filter(pk=memory.pk).update(status=status, status_changed_at=when, version=2)
    return memory


def exists(memory) -> bool:
    return Memory.objects.filter(pk=memory.pk).exists()


def test_retired_memories_past_retention_are_deleted(tenant, agent):
    old = [
        retire(m, status, ago(days=31))
        for m, status in zip(
            add_memories(tenant, agent, 3), ("tombstoned", "evicted", "expired"), strict=True
        )
    ]
    (recent,) = (retire(m, "tombstoned", ago(days=29)) for m in add_memories(tenant, agent))
    (at_cutoff,) = (retire(m, "expired", ago(days=30)) for m in add_memories(tenant, agent))
    # Active memories are never deleted, whatever their history says.
    (restored,) = (retire(m, "active", ago(days=90)) for m in add_memories(tenant, agent))

    counts = purge_retention(now=NOW)

    assert counts == {
        "memories_deleted": 4,
        "events_deleted": 0,
        "idempotency_deleted": 0,
        "messages_deleted": 0,
        "reads_deleted": 0,
    }
    assert [exists(m) for m in old] == [False, False, False]
    assert (exists(recent), exists(at_cutoff), exists(restored)) == (True, False, True)
    revision = MemoryRevision.objects.get(memory_id=old[0].pk)
    assert (revision.actor, revision.change_type, revision.version) == (
        "system:retention",
        "purge",
        3,
    )
    assert revision.before == {"status": "tombstoned"}
    assert revision.reason == "retention: 30 days after leaving active"
    assert purge_retention(now=NOW)["memories_deleted"] == 0


def test_days_option_and_setting_choose_the_period(tenant, agent):
    (memory,) = (retire(m, "evicted", ago(days=8)) for m in add_memories(tenant, agent))

    with override_settings(MEMORYHUB_RETENTION_DAYS=10):
        assert purge_retention(now=NOW)["memories_deleted"] == 0
    out = StringIO()
    call_command("purge_retention", "--now", NOW.isoformat(), "--days", "7", stdout=out)

    assert last_json_line(out.getvalue()) == {
        "memories_deleted": 1,
        "events_deleted": 0,
        "idempotency_deleted": 0,
        "messages_deleted": 0,
        "reads_deleted": 0,
    }
    assert not exists(memory)
    run = JobRun.objects.get(job="purge_retention", dry_run=False)
    assert (run.trigger, run.status, run.counts["memories_deleted"]) == ("command", "ok", 1)


def test_daily_reads_past_the_dashboards_window_and_its_margin_are_deleted(
    tenant, other_tenant, settings
):
    """The dashboard charts the last 30 UTC days of reads; purge_retention keeps them
    MEMORYHUB_READS_RETENTION_DAYS (default 60), never fewer than the chart reads."""
    today = NOW.date()  # NOW is noon UTC

    def reads(tenant, days_ago):
        return DailyReads.objects.create(
            tenant=tenant, day=today - timedelta(days=days_ago), reads=5
        )

    kept = [reads(tenant, 0), reads(tenant, 29), reads(tenant, 60), reads(other_tenant, 60)]
    for days_ago in (61, 62, 400):
        reads(tenant, days_ago)
    reads(other_tenant, 90)

    assert purge_retention(now=NOW, dry_run=True)["reads_deleted"] == 4
    assert DailyReads.objects.count() == 8
    counts = purge_retention(now=NOW, batch_size=2)
    assert counts["reads_deleted"] == 4
    assert sorted(DailyReads.objects.values_list("pk", flat=True)) == [r.pk for r in kept]
    assert purge_retention(now=NOW)["reads_deleted"] == 0
    # A day later, the oldest kept day is past the window too.
    assert purge_retention(now=NOW + timedelta(days=1))["reads_deleted"] == 2

    # A setting shorter than the chart's window still keeps what the chart reads.
    settings.MEMORYHUB_READS_RETENTION_DAYS = 7
    assert purge_retention(now=NOW)["reads_deleted"] == 0
    assert DailyReads.objects.filter(day=today - timedelta(days=29)).exists()
    settings.MEMORYHUB_READS_RETENTION_DAYS = 30
    # `tenant_id` limits it, like every part of the job.
    reads(other_tenant, 45)
    assert purge_retention(now=NOW, tenant_id=tenant.pk)["reads_deleted"] == 0
    assert purge_retention(now=NOW)["reads_deleted"] == 1


def test_idempotency_records_older_than_24_hours_are_deleted(tenant, other_tenant):
    def record(tenant, key, age):
        return IdempotencyRecord.objects.create(
            tenant=tenant,
            key_digest=key,
            request_hash="0" * 64,
            response_status=201,
            response_body={"ok": True},
            created_at=NOW - age,
        )

    stale = [record(tenant, f"k{i}", timedelta(hours=25)) for i in range(3)]
    stale.append(record(other_tenant, "k0", timedelta(days=3)))
    fresh = record(tenant, "fresh", timedelta(hours=23))

    counts = purge_retention(now=NOW, batch_size=2)

    assert counts == {
        "memories_deleted": 0,
        "events_deleted": 0,
        "idempotency_deleted": 4,
        "messages_deleted": 0,
        "reads_deleted": 0,
    }
    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [fresh.pk]


def test_dry_run_counts_and_deletes_nothing(tenant, agent):
    for m in add_memories(tenant, agent, 2):
        retire(m, "tombstoned", ago(days=40))

    out = StringIO()
    call_command("purge_retention", "--now", NOW.isoformat(), "--dry-run", stdout=out)

    assert last_json_line(out.getvalue()) == {
        "memories_deleted": 2,
        "events_deleted": 0,
        "idempotency_deleted": 0,
        "messages_deleted": 0,
        "reads_deleted": 0,
    }
    assert Memory.objects.count() == 2


def test_large_purge_goes_in_batches(tenant, agent):
    memories = add_memories(tenant, agent, 11)
    Memory.objects.filter(pk__in=[m.pk for m in memories]).update(
        status="expired", status_changed_at=ago(days=60)
    )
    lines: list[str] = []

    assert purge_retention(now=NOW, batch_size=4, progress=lines.append)["memories_deleted"] == 11
    assert len(lines) == 3
    assert not Memory.objects.exists()


# --- messages of ended threads (docs/formation.md#erasure-and-retention) -------------------------


def conversation(agent, thread_id: str, n: int, *, ended_days_ago: int | None, subject=None):
    """A thread of `n` messages (seqs 1..n, none extracted yet), ended that many days ago."""
    principal = Principal(tenant=agent.tenant, agent=agent)
    thread_messages_add(
        principal=principal,
        thread_id=thread_id,
        data={
            "messages": [{"role": "user", "content": f"{thread_id} says {i}"} for i in range(n)],
            "subject_id": subject,
            "extract": "off",
        },
        now=ago(days=90),
    )
    ended_at = None if ended_days_ago is None else ago(days=ended_days_ago)
    Thread.objects.filter(agent=agent, thread_id=thread_id).update(ended_at=ended_at)
    return Thread.objects.get(agent=agent, thread_id=thread_id)


def message_counts(*threads) -> list[tuple[int, int]]:
    """(stored messages, message_count) of each thread."""
    return [
        (Message.objects.filter(thread=t).count(), Thread.objects.get(pk=t.pk).message_count)
        for t in threads
    ]


def test_messages_of_threads_ended_past_retention_are_deleted_in_batches(tenant, agent):
    old = conversation(agent, "old", 5, ended_days_ago=31)
    at_cutoff = conversation(agent, "at-cutoff", 2, ended_days_ago=30)
    recent = conversation(agent, "recent", 3, ended_days_ago=29)
    open_thread = conversation(agent, "open", 3, ended_days_ago=None)
    lines: list[str] = []

    counts = purge_retention(now=NOW, batch_size=2, progress=lines.append)

    assert counts == {
        "memories_deleted": 0,
        "events_deleted": 0,
        "idempotency_deleted": 0,
        "messages_deleted": 7,
        "reads_deleted": 0,
    }
    assert len(lines) == 4  # 7 messages, 2 a batch
    assert message_counts(old, at_cutoff, recent, open_thread) == [(0, 0), (0, 0), (3, 3), (3, 3)]
    # The thread stays, and what is gone is no longer waiting for extraction.
    old.refresh_from_db()
    assert (old.last_seq, old.extracted_seq, old.summarized_seq, old.pending_messages) == (
        5,
        5,
        5,
        0,
    )
    assert old.extraction_due_at is None
    assert purge_retention(now=NOW)["messages_deleted"] == 0


def test_message_retention_setting_option_dry_run_and_tenant_scope(tenant, agent, other_tenant):
    mine = conversation(agent, "t", 2, ended_days_ago=10)
    theirs = conversation(make_agent(other_tenant, "globex-bot"), "t", 3, ended_days_ago=10)

    assert purge_retention(now=NOW)["messages_deleted"] == 0  # default: 30 days
    out = StringIO()
    call_command(
        "purge_retention", "--now", NOW.isoformat(), "--message-days", "7", "--dry-run", stdout=out
    )
    assert last_json_line(out.getvalue())["messages_deleted"] == 5
    assert message_counts(mine, theirs) == [(2, 2), (3, 3)]

    with override_settings(MEMORYHUB_MESSAGE_RETENTION_DAYS=7):
        call_command(
            "purge_retention", "--now", NOW.isoformat(), "--tenant", tenant.slug, stdout=out
        )
    assert last_json_line(out.getvalue()) == {
        "memories_deleted": 0,
        "events_deleted": 0,
        "idempotency_deleted": 0,
        "messages_deleted": 2,
        "reads_deleted": 0,
    }
    assert message_counts(mine, theirs) == [(0, 0), (3, 3)]
    # --now: the same rule as of another time.
    assert purge_retention(now=ago(days=5), message_days=7)["messages_deleted"] == 0
    assert purge_retention(now=ago(days=3), message_days=7)["messages_deleted"] == 3


def test_new_messages_reopen_an_ended_thread_and_retention_keeps_them(tenant, agent):
    thread = conversation(agent, "t", 2, ended_days_ago=40)
    principal = Principal(tenant=tenant, agent=agent)
    thread_messages_add(
        principal=principal,
        thread_id="t",
        data={"messages": [{"role": "user", "content": "I'm back"}], "extract": "off"},
        now=NOW,
    )
    thread.refresh_from_db()
    assert thread.ended_at is None

    assert purge_retention(now=NOW)["messages_deleted"] == 0
    assert message_counts(thread) == [(3, 3)]

"""purge_retention: retired memories past retention are deleted, idempotency records past 24 h."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import override_settings

from memories.jobs.retention import purge_retention
from memories.models import IdempotencyRecord, JobRun, Memory, MemoryRevision
from tests.jobs.conftest import NOW, add_memories, ago, last_json_line

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

    assert counts == {"memories_deleted": 4, "idempotency_deleted": 0}
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

    assert last_json_line(out.getvalue()) == {"memories_deleted": 1, "idempotency_deleted": 0}
    assert not exists(memory)
    run = JobRun.objects.get(job="purge_retention", dry_run=False)
    assert (run.trigger, run.status, run.counts["memories_deleted"]) == ("command", "ok", 1)


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

    assert counts == {"memories_deleted": 0, "idempotency_deleted": 4}
    assert list(IdempotencyRecord.objects.values_list("pk", flat=True)) == [fresh.pk]


def test_dry_run_counts_and_deletes_nothing(tenant, agent):
    for m in add_memories(tenant, agent, 2):
        retire(m, "tombstoned", ago(days=40))

    out = StringIO()
    call_command("purge_retention", "--now", NOW.isoformat(), "--dry-run", stdout=out)

    assert last_json_line(out.getvalue()) == {"memories_deleted": 2, "idempotency_deleted": 0}
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

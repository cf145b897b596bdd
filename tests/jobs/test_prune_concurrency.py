"""prune_memories under concurrency and crashes, against real PostgreSQL with committed data:
two workers at once, a worker SIGKILLed mid-run, a writer holding a row lock."""

from __future__ import annotations

import signal
import threading

import pytest
from django.db import connection, connections, transaction

from memories.bench.prune import insert_memories
from memories.jobs.prune import prune_memories
from memories.models import Memory, PruneRun
from memories.tasks import run_job
from tests.jobs.conftest import (
    NOW,
    add_memories,
    ago,
    last_json_line,
    prune_revisions,
    start_command,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def assert_each_change_has_exactly_one_revision():
    changed = Memory.objects.exclude(status="active").count()
    assert prune_revisions().count() == changed
    assert prune_revisions().values("memory_id").distinct().count() == changed
    with connection.cursor() as cursor:
        # Every changed memory sits at version 2 with its single revision at version 2.
        cursor.execute(
            """SELECT count(*) FROM memories_memory m
               JOIN memories_memoryrevision r ON r.memory_id = m.id
               WHERE m.status <> 'active' AND m.version = 2 AND r.version = 2"""
        )
        assert cursor.fetchone()[0] == changed


def test_two_workers_at_once_change_each_memory_exactly_once(tenant, agent):
    owner = {"tenant_id": tenant.pk, "agent_id": agent.pk}
    insert_memories(**owner, n=12_000, updated_at=ago(days=1), expires_at=ago(hours=1))
    insert_memories(**owner, n=8_000, updated_at=ago(days=4), category="daily")

    args = ("prune_memories", "--now", NOW.isoformat(), "--batch-size", "500")
    workers = [start_command(*args), start_command(*args)]
    results = [worker.communicate(timeout=300) for worker in workers]

    for worker, (_, err) in zip(workers, results, strict=True):
        assert worker.returncode == 0, err
    counts = [last_json_line(out) for out, _ in results]
    assert sum(c["expired"] for c in counts) == 12_000
    assert sum(c["daily_pruned"] for c in counts) == 8_000
    assert sum(c["total"] for c in counts) == 20_000
    assert not Memory.objects.filter(status="active").exists()
    assert_each_change_has_exactly_one_revision()
    assert PruneRun.objects.filter(status="ok").count() == 2


def test_a_worker_killed_mid_run_leaves_no_half_batch_and_the_next_run_finishes(tenant, agent):
    insert_memories(
        tenant_id=tenant.pk, agent_id=agent.pk, n=20_000, updated_at=NOW, expires_at=ago(hours=1)
    )

    worker = start_command("prune_memories", "--now", NOW.isoformat(), "--batch-size", "200")
    for line in worker.stdout:
        if line.startswith("prune: expired batch 1:"):
            worker.send_signal(signal.SIGKILL)  # right after the first batch committed
            break
    worker.wait(timeout=60)
    assert worker.returncode == -signal.SIGKILL
    with connection.cursor() as cursor:
        # The dead worker's server process ends once it notices; make that happen now, so
        # nothing it sent before dying can commit after we look.
        cursor.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )

    changed = Memory.objects.filter(status="expired").count()
    assert 200 <= changed < 20_000
    assert changed % 200 == 0  # whole batches only
    assert_each_change_has_exactly_one_revision()
    killed = PruneRun.objects.get()
    assert killed.status == "running"  # it never got to record an end

    rerun = run_job("prune_memories", now=NOW)

    assert rerun.counts["expired"] == 20_000 - changed
    assert not Memory.objects.filter(status="active").exists()
    assert_each_change_has_exactly_one_revision()
    killed.refresh_from_db()
    assert killed.status == "failed"
    assert killed.error.startswith("abandoned")


def test_a_memory_locked_by_a_writer_is_skipped_and_left_for_the_next_run(tenant, agent):
    due = add_memories(tenant, agent, 5, category="conversation", updated_at=ago(hours=30))
    locked, rewritten = due[0].pk, due[1].pk
    lock_taken, prune_done = threading.Event(), threading.Event()

    def writer():
        # Writes in flight: row locks on two due memories, one of which it makes fresh.
        try:
            with transaction.atomic():
                list(Memory.objects.select_for_update().filter(pk__in=[locked, rewritten]))
                Memory.objects.filter(pk=rewritten).update(updated_at=NOW, version=2)
                lock_taken.set()
                prune_done.wait(timeout=60)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer)
    thread.start()
    assert lock_taken.wait(timeout=30)
    try:
        counts = prune_memories(now=NOW)
    finally:
        prune_done.set()
        thread.join(timeout=60)

    assert counts["conversation_ended"] == 3
    assert Memory.objects.get(pk=rewritten).status == "active"  # no longer due
    assert Memory.objects.get(pk=locked).status == "active"  # skipped, still due
    assert prune_memories(now=NOW)["conversation_ended"] == 1
    assert Memory.objects.get(pk=locked).status == "expired"
    assert Memory.objects.get(pk=rewritten).status == "active"


def test_workers_share_one_run(tenant, agent):
    insert_memories(
        tenant_id=tenant.pk, agent_id=agent.pk, n=3_000, updated_at=NOW, expires_at=ago(hours=1)
    )

    counts = prune_memories(now=NOW, batch_size=100, workers=3)

    assert counts["expired"] == 3_000
    assert_each_change_has_exactly_one_revision()

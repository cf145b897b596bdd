"""prune_memories under concurrency and crashes, against real PostgreSQL with committed data:
two workers at once (age rules and cap sweeps), a worker SIGKILLed mid-run, a writer holding a
row lock, and the real write services racing a prune in another process."""

from __future__ import annotations

import signal
import threading

import pytest
from django.db import connection, connections, transaction

from accounts.principal import Principal
from bench.prune import insert_memories
from memories.jobs.prune import prune_memories
from memories.models import Memory, MemoryRevision, PruneRun
from memories.services.changes import memory_update
from memories.services.store import memory_store
from memories.tasks import run_job
from memoryhub.errors import NotFound
from tests.factories import make_agent
from tests.support.commands import last_json_line, start_command
from tests.support.jobs import (
    NOW,
    add_memories,
    ago,
    held_at_start,
    prune_revisions,
    row_number,
    spread_in_order,
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


def two_prunes_at_once(*, batch_size: int) -> list[dict]:
    """Two `prune_memories` processes released together; their final counts."""
    args = ("prune_memories", "--now", NOW.isoformat(), "--batch-size", str(batch_size))
    with held_at_start() as release:
        workers = [start_command(*args), start_command(*args)]
        release(workers)
    results = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, err) in zip(workers, results, strict=True):
        assert worker.returncode == 0, err
    return [last_json_line(out) for out, _ in results]


def test_two_workers_at_once_change_each_memory_exactly_once(tenant, agent):
    owner = {"tenant_id": tenant.pk, "agent_id": agent.pk}
    insert_memories(**owner, n=12_000, updated_at=ago(days=1), expires_at=ago(hours=1))
    insert_memories(**owner, n=8_000, updated_at=ago(days=4), category="daily")

    counts = two_prunes_at_once(batch_size=200)

    assert all(c["total"] > 0 for c in counts), counts  # both really took part
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


def test_two_cap_sweeps_at_once_evict_each_memory_exactly_once(tenant):
    agents = [make_agent(tenant, f"capped-{i}", entry_cap=500) for i in range(4)]
    for agent in agents:
        insert_memories(
            tenant_id=tenant.pk, agent_id=agent.pk, n=3_000, updated_at=NOW, category="notes"
        )
        # Row n was last read at NOW - 1 day + n s: the lowest numbers are coldest.
        spread_in_order(agent.pk, "last_accessed_at", ago(days=1))

    counts = two_prunes_at_once(batch_size=100)

    assert all(c["evicted"] > 0 for c in counts), counts  # both really took part
    assert sum(c["evicted"] for c in counts) == 4 * 2_500
    assert_each_change_has_exactly_one_revision()
    for agent in agents:
        evicted = Memory.objects.filter(agent=agent, status="evicted").values_list("pk", flat=True)
        # Exactly the 2,500 coldest: rows 1..2500.
        assert sorted(row_number(pk) for pk in evicted) == list(range(1, 2_501))
        assert Memory.objects.filter(agent=agent, status="active").count() == 500


def test_writes_through_the_services_while_a_prune_runs_are_never_pruned_by_it(tenant):
    """memory_update and keyed memory_store race a prune of 20,000 due daily memories in another
    process: whatever a write made fresh again stays; whatever the prune took first is gone to
    the write too (update: 404; keyed store: a new memory under the key)."""
    agent = make_agent(tenant, "diarist", entry_cap=100_000)  # caps are not what this tests
    insert_memories(
        tenant_id=tenant.pk, agent_id=agent.pk, n=20_000, updated_at=NOW, category="daily"
    )
    # Row n was last written at NOW - 80 h + n s: all due; the prune walks them 1, 2, 3, ...
    spread_in_order(agent.pk, "updated_at", ago(hours=80))
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memories_memory SET key = 'k-' || right(id, 16)::int "
            "WHERE agent_id = %s AND right(id, 16)::int %% 2 = 0",
            [agent.pk],
        )
    by_number = {row_number(pk): pk for pk in Memory.objects.values_list("pk", flat=True)}
    principal = Principal(tenant=tenant, agent=agent)
    refreshed, taken_first = set(), set()

    def write(n: int) -> None:
        """Odd rows through PATCH's service, even ones re-stored by key."""
        if n % 2:
            try:
                memory_update(
                    principal=principal, memory_id=by_number[n], data={"text": f"new {n}"}, now=NOW
                )
                refreshed.add(by_number[n])
            except NotFound:
                taken_first.add(by_number[n])
        else:
            data = {"key": f"k-{n}", "text": f"new {n}", "category": "daily"}
            result = memory_store(principal=principal, data=data, now=NOW)
            (refreshed if result.memory.pk == by_number[n] else taken_first).add(by_number[n])

    def frontier() -> int:
        """The highest row the run has committed so far."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT coalesce(max(right(id, 16)::int), 0) FROM memories_memory "
                "WHERE status = 'expired'"
            )
            return cursor.fetchone()[0]

    worker = start_command("prune_memories", "--now", NOW.isoformat(), "--batch-size", "200")
    for line in worker.stdout:
        if line.startswith("prune: daily_pruned batch 1:"):
            break
    # While the run lasts: a row just ahead of it (it may be in the batch being pruned: a race
    # either side may win), then one far ahead (the writer wins), in turns.
    far = iter(range(20_000, 0, -7))
    step = 0
    while worker.poll() is None:
        step += 1
        n = frontier() + 1 + (step * 37) % 400 if step % 2 else next(far, 0)
        if n in by_number and by_number[n] not in refreshed | taken_first:
            write(n)
    out, err = worker.communicate(timeout=300)

    assert worker.returncode == 0, err
    # The writes raced the run and met it: some won, some came after the prune took the row.
    assert refreshed and taken_first
    counts = last_json_line(out)
    assert counts["daily_pruned"] == 20_000 - len(refreshed)
    assert not prune_revisions(memory_id__in=refreshed).exists()
    assert set(Memory.objects.filter(pk__in=refreshed).values_list("status", flat=True)) == {
        "active"
    }
    assert set(Memory.objects.filter(pk__in=taken_first).values_list("status", flat=True)) == {
        "expired"
    }
    # Every memory the run changed has exactly one revision of it, and was still due.
    assert_each_change_has_exactly_one_revision()
    assert not Memory.objects.filter(
        status="active", category="daily", updated_at__lte=ago(hours=72)
    ).exists()
    # A keyed store that came after the prune created a new memory under the key.
    keys = {f"k-{row_number(pk)}" for pk in taken_first if row_number(pk) % 2 == 0}
    assert Memory.objects.filter(key__in=keys, status="active").count() == len(keys)
    assert not MemoryRevision.objects.filter(memory_id__in=refreshed, version__gt=2).exists()

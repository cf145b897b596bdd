"""Helpers of the job tests: a fixed clock, bulk memory builders, the prune's revisions and a
start line that holds job processes until all are queued."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from django.db import connection, connections

from memories.models import Memory, MemoryRevision

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


def add_memories(
    tenant,
    agent=None,
    n: int = 1,
    *,
    category: str = "core",
    updated_at: datetime | None = None,
    expires_at: datetime | None = None,
    last_accessed_at: datetime | None = None,
    thread_id: str | None = None,
    text: str = "fact",
) -> list[Memory]:
    """`n` active memories of `agent` (None: workspace) written at `updated_at` (default NOW)."""
    updated_at = updated_at or NOW
    if category == "conversation" and thread_id is None:
        thread_id = "thread-1"
    rows = [
        Memory(
            tenant=tenant,
            agent=agent,
            created_by=f"agent:{agent.slug}" if agent else "operator:test@acme.test",
            category=category,
            text=f"{text} {i}",
            thread_id=thread_id,
            expires_at=expires_at,
            created_at=updated_at,
            updated_at=updated_at,
            last_confirmed_at=updated_at,
            last_accessed_at=last_accessed_at or updated_at,
        )
        for i in range(n)
    ]
    return Memory.objects.bulk_create(rows, batch_size=5000)


def prune_revisions(**filters):
    return MemoryRevision.objects.filter(actor="system:prune", **filters)


def ago(**delta) -> datetime:
    return NOW - timedelta(**delta)


@contextmanager
def held_at_start() -> Iterator[Callable[[list[subprocess.Popen]], None]]:
    """A start line for job processes: each is held at its first write, then all go at once.

    A transaction on a connection of its own locks `memories_jobrun` in EXCLUSIVE mode (reads go
    on, writes queue), so every `run_job` stops at its JobRun insert, before touching a memory.
    `release(workers)` returns once every worker is queued on that lock, committing to let them
    all through together: their runs certainly overlap.
    """
    gate = connections.create_connection("default")
    gate.set_autocommit(False)
    with gate.cursor() as cursor:
        cursor.execute("LOCK TABLE memories_jobrun IN EXCLUSIVE MODE")

    def release(workers: list[subprocess.Popen]) -> None:
        deadline = time.monotonic() + 120
        while True:
            with gate.cursor() as cursor:
                cursor.execute(
                    "SELECT count(DISTINCT pid) FROM pg_locks "
                    "WHERE relation = 'memories_jobrun'::regclass AND NOT granted"
                )
                if cursor.fetchone()[0] >= len(workers):
                    break
            for worker in workers:
                if worker.poll() is not None:
                    raise AssertionError(f"a worker ended before the start: {worker.communicate()}")
            if time.monotonic() > deadline:
                raise AssertionError("the workers never reached the start line")
            time.sleep(0.02)  # polling a condition (processes starting up), not timing anything
        gate.commit()

    try:
        yield release
    finally:
        gate.rollback()
        gate.close()


def spread_in_order(agent_id: int, column: str, base: datetime) -> None:
    """Give `insert_memories` rows of `agent_id` distinct `column` values: `base` + n seconds
    for the row numbered n (the digits that end its id), so the rows have a known order."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE memories_memory SET {column} = %s + right(id, 16)::int * interval '1 second' "
            "WHERE agent_id = %s",
            [base, agent_id],
        )


def row_number(memory_id: str) -> int:
    return int(memory_id[-16:])

"""Access bookkeeping for reads (`last_accessed_at`, `access_count`) without slowing them down.

Bumping those columns is an UPDATE of every returned row. No index names either column and the table
leaves a quarter of each page free (memories/sql/memory_storage.sql), so a bump is a heap-only (HOT) update: no entry
in the HNSW graph, the GIN index or the B-trees (a fraction of the cost a row:
docs/performance.md#code-figures). Still, reads hand their ids to a per-process bumper that merges
them and writes them with ONE UPDATE per flush (about once a second) from a background thread, off
the request path.

Each read also counts once in its tenant's `DailyReads` for the day (the dashboard's chart),
merged the same way and written by the same statement.

`MEMORYHUB_ACCESS_BUMP = "sync"` (the test default) does the one UPDATE inside the request
instead, so tests can assert the counts; `"off"` records nothing (eviction then goes by
`updated_at` alone). A crash loses at most one interval of access stamps and read counts,
which only ever makes eviction slightly less precise.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, date, datetime

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F

from memories.models import DailyReads, Memory

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0

COUNT_READS = f"""
INSERT INTO {DailyReads._meta.db_table} AS r (tenant_id, day, reads)
SELECT * FROM unnest(%s::bigint[], %s::date[], %s::bigint[])
ON CONFLICT (tenant_id, day) DO UPDATE SET reads = r.reads + EXCLUDED.reads
"""

# One statement: the read counts (a data-modifying WITH runs whether or not it is read), then
# the memories' bumps.
UPDATE_SQL = f"""
WITH counted AS ({COUNT_READS})
UPDATE {Memory._meta.db_table} AS m
SET last_accessed_at = GREATEST(m.last_accessed_at, v.ts), access_count = m.access_count + v.n
FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::int[]) AS v(tenant_id, id, ts, n)
WHERE m.tenant_id = v.tenant_id AND m.id = v.id
"""


def _day(now: datetime) -> date:
    return now.astimezone(UTC).date()


def mode() -> str:
    return getattr(settings, "MEMORYHUB_ACCESS_BUMP", "deferred")


def bump_access(tenant_id: int, ids: list[str], now: datetime) -> None:
    """Record one read that returned these memories (maybe none): the memories' bumps and the
    tenant's read count (now, or merged into the next flush)."""
    current = mode()
    if current == "off":
        return
    if current == "sync":
        with connection.cursor() as cursor:
            cursor.execute(COUNT_READS, [[tenant_id], [_day(now)], [1]])
        if ids:
            Memory.objects.for_tenant(tenant_id).filter(pk__in=ids).update(
                last_accessed_at=now, access_count=F("access_count") + 1
            )
        return
    _bumper.add(tenant_id, ids, now)


class Bumper:
    """Merges the reads' ids; a background thread writes them every `FLUSH_SECONDS`.

    `wait(seconds)` is how that thread waits between flushes (`time.sleep`; tests hand it a
    gate of their own, so that the flusher wakes when they say, not when the clock does)."""

    def __init__(self, wait: Callable[[float], object] = time.sleep) -> None:
        self._lock = threading.Lock()
        self._pending: dict[tuple[int, str], tuple[datetime, int]] = {}
        self._wait = wait
        self._reads: dict[tuple[int, date], int] = {}
        self._thread: threading.Thread | None = None

    def add(self, tenant_id: int, ids: list[str], now: datetime) -> None:
        with self._lock:
            day = (tenant_id, _day(now))
            self._reads[day] = self._reads.get(day, 0) + 1
            for memory_id in ids:
                key = (tenant_id, memory_id)
                seen = self._pending.get(key)
                self._pending[key] = (max(seen[0], now), seen[1] + 1) if seen else (now, 1)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="memoryhub-access-bump", daemon=True
                )
                self._thread.start()

    def _take(self) -> tuple[dict, dict]:
        with self._lock:
            pending, self._pending = self._pending, {}
            reads, self._reads = self._reads, {}
        return pending, reads

    def flush(self) -> int:
        pending, reads = self._take()
        if not pending and not reads:
            return 0
        keys = sorted(pending)  # a stable order: two flushers never deadlock on row locks
        days = sorted(reads)
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    UPDATE_SQL,
                    [
                        [d[0] for d in days],
                        [d[1] for d in days],
                        [reads[d] for d in days],
                        [k[0] for k in keys],
                        [k[1] for k in keys],
                        [pending[k][0] for k in keys],
                        [pending[k][1] for k in keys],
                    ],
                )
        except Exception:  # noqa: BLE001 - bookkeeping must never take the server down
            logger.exception("could not record memory accesses")
        return len(keys)

    def _run(self) -> None:
        while True:
            self._wait(FLUSH_SECONDS)
            close_old_connections()
            self.flush()
            with self._lock:
                if not self._pending and not self._reads:
                    self._thread = None
                    connection.close()
                    return


_bumper = Bumper()


def flush_access() -> int:
    """Write what is pending now (at exit, and for commands that want it on disk)."""
    return _bumper.flush()


atexit.register(flush_access)

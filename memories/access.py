"""Access bookkeeping for reads (`last_accessed_at`, `access_count`) without slowing them down.

Bumping those columns is an UPDATE of every returned row. No index names either column and the
table leaves a quarter of each page free (migration 0020), so a bump is a heap-only (HOT)
update: no entry in the HNSW graph, the GIN index or the B-trees (~0.1 ms a row instead of
~1 ms). Still, reads hand their ids to a per-process bumper that merges them and writes them
with ONE UPDATE per flush (about once a second) from a background thread, off the request path.

`MEMORYHUB_ACCESS_BUMP = "sync"` (the test default) does the one UPDATE inside the request
instead, so tests can assert the counts; `"off"` records nothing (eviction then goes by
`updated_at` alone). A crash loses at most one interval of access stamps,
which only ever makes eviction slightly less precise.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from django.conf import settings
from django.db import close_old_connections, connection
from django.db.models import F

from memories.models import Memory

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0

UPDATE_SQL = f"""
UPDATE {Memory._meta.db_table} AS m
SET last_accessed_at = GREATEST(m.last_accessed_at, v.ts), access_count = m.access_count + v.n
FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::int[]) AS v(tenant_id, id, ts, n)
WHERE m.tenant_id = v.tenant_id AND m.id = v.id
"""


def mode() -> str:
    return getattr(settings, "MEMORYHUB_ACCESS_BUMP", "deferred")


def bump_access(tenant_id: int, ids: list[str], now: datetime) -> None:
    """Record that these memories were just read (one UPDATE now, or merged into the next)."""
    current = mode()
    if not ids or current == "off":
        return
    if current == "sync":
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
        self._thread: threading.Thread | None = None

    def add(self, tenant_id: int, ids: list[str], now: datetime) -> None:
        with self._lock:
            for memory_id in ids:
                key = (tenant_id, memory_id)
                seen = self._pending.get(key)
                self._pending[key] = (max(seen[0], now), seen[1] + 1) if seen else (now, 1)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="memoryhub-access-bump", daemon=True
                )
                self._thread.start()

    def _take(self) -> dict:
        with self._lock:
            pending, self._pending = self._pending, {}
        return pending

    def flush(self) -> int:
        pending = self._take()
        if not pending:
            return 0
        keys = sorted(pending)  # a stable order: two flushers never deadlock on row locks
        try:
            with connection.cursor() as cursor:
                cursor.execute(
                    UPDATE_SQL,
                    [
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
                if not self._pending:
                    self._thread = None
                    connection.close()
                    return


_bumper = Bumper()


def flush_access() -> int:
    """Write what is pending now (at exit, and for commands that want it on disk)."""
    return _bumper.flush()


atexit.register(flush_access)

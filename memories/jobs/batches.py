"""What the batch jobs share: batch sizes, progress reporting, one-statement-per-batch SQL."""

from __future__ import annotations

import json
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

# Rows per batch: large enough to amortise a round trip, small enough that one batch holds its
# row locks for well under a second and a killed worker loses at most one uncommitted batch.
DEFAULT_BATCH_SIZE = 5000

Progress = Callable[[str], None]

# Where keyset cursors over timestamps start.
BEGINNING = datetime(1, 1, 1, tzinfo=UTC)

# A job's tenant scope, over alias `m`: every tenant when `scope_tenant_id` is NULL (PostgreSQL
# plans each batch with its parameters, so the unscoped form costs nothing).
TENANT_SCOPE = "(%(scope_tenant_id)s::bigint IS NULL OR m.tenant_id = %(scope_tenant_id)s::bigint)"


class TenantCounts:
    """Each tenant's share of the counts of a run over every tenant.

    A scheduled run works across tenants; the console shows an operator only their tenant's
    slice of it (the console is scoped to the operator's tenant). Thread-safe: the
    prune's workers add to one instance.
    """

    def __init__(self) -> None:
        self._counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self._lock = threading.Lock()

    def add(self, key: str, per_tenant: Iterable[tuple[int | str, int]]) -> None:
        with self._lock:
            for tenant_id, n in per_tenant:
                if n:
                    self._counts[int(tenant_id)][key] += n

    def add_json(self, key: str, text: str | None) -> None:
        """Add a `json_object_agg(tenant_id, n)` result (NULL when no row was counted)."""
        if text:
            self.add(key, json.loads(text).items())

    def slices(self, keys: Iterable[str]) -> dict[str, dict[str, int]]:
        """{tenant id: {key: n}} over `keys` (a `total` key sums the others); tenants with
        nothing counted are left out (their slice is all zeros)."""
        keys = list(keys)
        out: dict[str, dict[str, int]] = {}
        with self._lock:
            for tenant_id, counts in sorted(self._counts.items()):
                share = {k: counts.get(k, 0) for k in keys if k != "total"}
                if "total" in keys:
                    share["total"] = sum(share.values())
                out[str(tenant_id)] = share
        return out


# Per-tenant counts of a CTE's rows (alias `rows`, with a tenant_id column) as JSON text.
PER_TENANT_JSON = (
    "(SELECT json_object_agg(t.tenant_id, t.n)::text "
    "FROM (SELECT tenant_id, count(*) AS n FROM {rows} GROUP BY tenant_id) t)"
)


def report(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def batch_execute(sql: str, params: dict[str, Any] | Sequence[Any]) -> tuple:
    """Run one batch statement in its own transaction and return its single result row.

    A worker killed mid-batch leaves nothing half-applied: PostgreSQL rolls the transaction back
    and releases its row locks, and the next run picks those rows up again.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params: dict[str, Any] | Sequence[Any] = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()

"""`purge_retention`: hard-delete what left `active` long ago, and stale idempotency records.

- Memories with status `tombstoned`, `evicted` or `expired` whose `status_changed_at` is at
  least `days` (settings.MEMORYHUB_RETENTION_DAYS, default 30) before now are deleted. Each
  deletion writes one revision (`system:retention`, change type `purge`), so the audit log says
  where the memory went; earlier revisions stay (the history outlives the row, as designed in
  `MemoryRevision`). Erasing content from history is the operator's `Purge`, not retention.
- Idempotency records older than 24 h are deleted (their replay window is over).

Batches are one statement each (`FOR UPDATE SKIP LOCKED`, re-checked in the DELETE), walked
tenant by tenant so the scan follows `memory_inactive_idx`, which leads with the tenant. A
memory restored meanwhile is active again and therefore not deleted.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from memories.clock import resolve_now
from memories.jobs.batches import (
    DEFAULT_BATCH_SIZE,
    Progress,
    batch_execute,
    fetch_all,
    fetch_value,
    report,
)

ACTOR = "system:retention"
IDEMPOTENCY_TTL = timedelta(hours=24)
RETIRED = "m.status IN ('tombstoned', 'evicted', 'expired') AND m.status_changed_at <= %(cutoff)s"

DELETE_MEMORIES = f"""
WITH picked AS (
    SELECT m.id FROM memories_memory m
    WHERE m.tenant_id = %(tenant_id)s AND {RETIRED}
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
),
gone AS (
    DELETE FROM memories_memory m
    WHERE m.id = ANY (ARRAY(SELECT id FROM picked)) AND {RETIRED}
    RETURNING m.id, m.tenant_id, m.version, m.status
),
revisions AS (
    INSERT INTO memories_memoryrevision
        (tenant_id, memory_id, version, actor, change_type, reason, before, after, created_at)
    SELECT g.tenant_id, g.id, g.version + 1, %(actor)s, 'purge', %(reason)s,
           jsonb_build_object('status', g.status), NULL, %(now)s
    FROM gone g
    RETURNING 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM revisions)
"""

DELETE_IDEMPOTENCY = """
WITH picked AS (
    SELECT r.id FROM memories_idempotencyrecord r
    WHERE r.created_at <= %(cutoff)s
    ORDER BY r.created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM memories_idempotencyrecord r
    WHERE r.id = ANY (ARRAY(SELECT id FROM picked)) AND r.created_at <= %(cutoff)s
    RETURNING 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM gone)
"""


def _drain(sql: str, params: dict, *, batch_size: int, progress, label: str) -> int:
    total = 0
    while True:
        picked, changed = batch_execute(sql, dict(params, limit=batch_size))
        total += changed
        if picked:
            report(progress, f"purge_retention: {label}: {changed} deleted ({total} so far)")
        if picked < batch_size:
            return total


def purge_retention(
    *,
    now: datetime | None = None,
    days: int | None = None,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Delete memories retired `days` ago or more and idempotency records past 24 h."""
    now = resolve_now(now)
    days = settings.MEMORYHUB_RETENTION_DAYS if days is None else days
    memory_params = {
        "now": now,
        "cutoff": now - timedelta(days=days),
        "actor": ACTOR,
        "reason": f"retention: {days} days after leaving active",
    }
    idempotency_params = {"cutoff": now - IDEMPOTENCY_TTL}
    if dry_run:
        counts = {
            "memories_deleted": fetch_value(
                f"SELECT count(*) FROM memories_memory m WHERE {RETIRED}", memory_params
            ),
            "idempotency_deleted": fetch_value(
                "SELECT count(*) FROM memories_idempotencyrecord WHERE created_at <= %(cutoff)s",
                idempotency_params,
            ),
        }
        report(progress, f"purge_retention (dry run): would delete {counts}")
        return counts
    deleted = 0
    for (tenant_id,) in fetch_all("SELECT id FROM accounts_tenant ORDER BY id"):
        deleted += _drain(
            DELETE_MEMORIES,
            dict(memory_params, tenant_id=tenant_id),
            batch_size=batch_size,
            progress=progress,
            label=f"memories of tenant {tenant_id}",
        )
    return {
        "memories_deleted": deleted,
        "idempotency_deleted": _drain(
            DELETE_IDEMPOTENCY,
            idempotency_params,
            batch_size=batch_size,
            progress=progress,
            label="idempotency records",
        ),
    }

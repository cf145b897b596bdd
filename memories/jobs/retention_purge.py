"""`purge_retention`: hard-delete what left `active` long ago, and stale idempotency records.

- Memories with status `tombstoned`, `evicted` or `expired` whose `status_changed_at` is at
  least `days` (settings.MEMORYHUB_RETENTION_DAYS, default 30) before now are deleted. Each
  deletion writes one revision (`system:retention`, change type `purge`), so the audit log says
  where the memory went; earlier revisions stay (the history outlives the row, as designed in
  `MemoryRevision`). Erasing content from history is the operator's `Purge`, not retention.
- Idempotency records older than 24 h are deleted (their replay window is over).
- Events older than settings.MEMORYHUB_EVENT_RETENTION_DAYS (default 7) are deleted,
  with their webhook deliveries. A deleted memory's last event is `memory.purged`, without its
  content.
- Reads counted per day (`DailyReads`, the dashboard's reads chart) older than
  settings.MEMORYHUB_READS_RETENTION_DAYS (default 60; never fewer than the
  `DASHBOARD_DAYS` the chart draws) are deleted: nothing else reads them.
- Messages of threads ended at least `message_days` (settings.MEMORYHUB_MESSAGE_RETENTION_DAYS,
  default 30) before now are deleted; the thread stays with its summary and counts,
  its message count goes down, and its watermarks move to its last message (what is gone
  cannot be extracted). A thread that got new messages since was reopened by them (its
  `ended_at` is cleared) and keeps them.
- The rate limit's counters of keys idle for a day are deleted (a run over all tenants; not
  counted: a counter is no one's data).

Batches are one statement each (`FOR UPDATE SKIP LOCKED`, re-checked in the DELETE), walked
tenant by tenant so the scan follows `memory_inactive_idx`, which leads with the tenant. A
memory restored meanwhile is active again and therefore not deleted. `tenant_id` limits a run
to one tenant (the console's `Run now`), idempotency records included.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta

from django.conf import settings

from memories.clock import resolve_now
from memories.events.record import EVENT_RETURNING, insert_events_sql
from memories.jobs.batches import (
    DEFAULT_BATCH_SIZE,
    PER_TENANT_JSON,
    TENANT_SCOPE,
    Progress,
    TenantCounts,
    batch_execute,
    fetch_all,
    report,
)
from memories.models import DASHBOARD_DAYS, DailyReads, Event, WebhookDelivery
from memories.ratelimit import delete_stale_counters
from memories.revisions import insert_revisions_sql
from memories.services.lifecycle import PURGED_FIELDS

ACTOR = "system:retention"
IDEMPOTENCY_TTL = timedelta(hours=24)
RETIRED = "m.status IN ('tombstoned', 'evicted', 'expired') AND m.status_changed_at <= %(cutoff)s"

# A deletion is the memory's last change: its revision takes the next version.
REVISION_PER_DELETED_ROW = insert_revisions_sql(
    rows="gone g",
    tenant_id="g.tenant_id",
    memory_id="g.id",
    version="g.version + 1",
    actor="%(actor)s",
    change_type="'purge'",
    reason="%(reason)s",
    before="jsonb_build_object('status', g.status)",
    after="NULL",
    created_at="%(now)s",
)

# ... and its event: memory.purged, holding the memory's public object without its content
# (`lifecycle.PURGED_FIELDS`), at the revision's version.
EVENT_PER_DELETED_ROW = insert_events_sql(
    rows="gone g",
    alias="g",
    event_type="'memory.purged'",
    version="g.version + 1",
    occurred_at="%(now)s",
    left_review=False,
    patch="jsonb_build_object('version', g.version + 1) || %(purged)s::jsonb",
)

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
    RETURNING {EVENT_RETURNING}
),
revisions AS (
    {REVISION_PER_DELETED_ROW}
    RETURNING 1
),
events AS (
    {EVENT_PER_DELETED_ROW}
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM revisions)
"""

# Threads are locked (SKIP LOCKED) before their messages go: an ingest into one of them holds
# the same lock, so it either reopens the thread first or adds its messages after the batch.
ENDED = "t.ended_at <= %(cutoff)s AND t.message_count > 0"
DELETE_MESSAGES = f"""
WITH threads AS (
    SELECT t.id FROM memories_thread t
    WHERE t.tenant_id = %(tenant_id)s AND {ENDED}
    ORDER BY t.ended_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
picked AS (
    SELECT m.id FROM memories_message m
    WHERE m.tenant_id = %(tenant_id)s AND m.thread_id = ANY (ARRAY(SELECT id FROM threads))
    LIMIT %(limit)s
),
gone AS (
    DELETE FROM memories_message m
    WHERE m.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING m.thread_id
),
counted AS (
    SELECT thread_id, count(*) AS n FROM gone GROUP BY thread_id
),
emptied AS (
    UPDATE memories_thread t SET
        message_count = greatest(t.message_count - c.n, 0),
        extracted_seq = t.last_seq,
        summarized_seq = t.last_seq,
        extraction_due_at = NULL
    FROM counted c
    WHERE t.id = c.thread_id
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM gone)
"""

# Events past MEMORYHUB_EVENT_RETENTION_DAYS, with their webhook deliveries (the delivery log).
DELETE_EVENTS = f"""
WITH picked AS (
    SELECT e.id FROM {Event._meta.db_table} e
    WHERE e.tenant_id = %(tenant_id)s AND e.occurred_at <= %(cutoff)s
    ORDER BY e.occurred_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
deliveries AS (
    DELETE FROM {WebhookDelivery._meta.db_table} d
    WHERE d.tenant_id = %(tenant_id)s AND d.event_id = ANY (ARRAY(SELECT id FROM picked))
),
gone AS (
    DELETE FROM {Event._meta.db_table} e WHERE e.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM gone)
"""

# Days of read counts before the cutoff day (`reads_cutoff`): the dashboard draws none of them.
DELETE_READS = f"""
WITH picked AS (
    SELECT r.id FROM {DailyReads._meta.db_table} r
    WHERE r.tenant_id = %(tenant_id)s AND r.day < %(cutoff)s
    ORDER BY r.day
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM {DailyReads._meta.db_table} r WHERE r.id = ANY (ARRAY(SELECT id FROM picked))
    RETURNING 1
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM gone)
"""


def reads_cutoff(now: datetime) -> date:
    """The first UTC day of read counts kept: MEMORYHUB_READS_RETENTION_DAYS before today, and
    never inside the dashboard's window (`DASHBOARD_DAYS`, today included)."""
    days = max(settings.MEMORYHUB_READS_RETENTION_DAYS, DASHBOARD_DAYS)
    return now.astimezone(UTC).date() - timedelta(days=days)


DELETE_IDEMPOTENCY = f"""
WITH picked AS (
    SELECT m.id FROM memories_idempotencyrecord m
    WHERE m.created_at <= %(cutoff)s AND {TENANT_SCOPE}
    ORDER BY m.created_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM memories_idempotencyrecord r
    WHERE r.id = ANY (ARRAY(SELECT id FROM picked)) AND r.created_at <= %(cutoff)s
    RETURNING r.tenant_id
)
SELECT (SELECT count(*) FROM picked), (SELECT count(*) FROM gone),
       {PER_TENANT_JSON.format(rows="gone")}
"""


def _drain(
    sql: str,
    params: dict,
    *,
    batch_size: int,
    progress,
    label: str,
    per_tenant: TenantCounts | None = None,
    key: str = "",
) -> int:
    total = 0
    while True:
        picked, changed, *by_tenant = batch_execute(sql, dict(params, limit=batch_size))
        total += changed
        if per_tenant is not None and by_tenant:
            per_tenant.add_json(key, by_tenant[0])
        if picked:
            report(progress, f"purge_retention: {label}: {changed} deleted ({total} so far)")
        if picked < batch_size:
            return total


def purge_retention(
    *,
    now: datetime | None = None,
    days: int | None = None,
    message_days: int | None = None,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    tenant_id: int | None = None,
    per_tenant: TenantCounts | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Delete memories retired `days` ago or more, idempotency records past 24 h, the
    messages of threads ended `message_days` ago or more, events past their retention and
    read counts past theirs (`reads_cutoff`).

    `tenant_id` limits the run to one tenant; `per_tenant` collects each tenant's share.
    """
    now = resolve_now(now)
    days = settings.MEMORYHUB_RETENTION_DAYS if days is None else days
    memory_params = {
        "now": now,
        "cutoff": now - timedelta(days=days),
        "actor": ACTOR,
        "reason": f"retention: {days} days after leaving active",
        "purged": json.dumps(PURGED_FIELDS),
    }
    event_params = {"cutoff": now - timedelta(days=settings.MEMORYHUB_EVENT_RETENTION_DAYS)}
    reads_params = {"cutoff": reads_cutoff(now)}
    idempotency_params = {"cutoff": now - IDEMPOTENCY_TTL, "scope_tenant_id": tenant_id}
    if message_days is None:
        message_days = settings.MEMORYHUB_MESSAGE_RETENTION_DAYS
    message_params = {"cutoff": now - timedelta(days=message_days)}
    if dry_run:
        counts = {}
        for key, sql, params in (
            ("memories_deleted", f"memories_memory m WHERE {RETIRED}", memory_params),
            ("events_deleted", "memories_event m WHERE m.occurred_at <= %(cutoff)s", event_params),
            ("reads_deleted", "memories_dailyreads m WHERE m.day < %(cutoff)s", reads_params),
            (
                "idempotency_deleted",
                "memories_idempotencyrecord m WHERE m.created_at <= %(cutoff)s",
                idempotency_params,
            ),
        ):
            by_tenant = fetch_all(
                f"SELECT m.tenant_id, count(*) FROM {sql} AND {TENANT_SCOPE} GROUP BY m.tenant_id",
                dict(params, scope_tenant_id=tenant_id),
            )
            counts[key] = sum(n for _, n in by_tenant)
            if per_tenant is not None:
                per_tenant.add(key, by_tenant)
        by_tenant = fetch_all(
            "SELECT m.tenant_id, sum(m.message_count)::bigint FROM memories_thread m "
            f"WHERE m.ended_at <= %(cutoff)s AND {TENANT_SCOPE} GROUP BY m.tenant_id",
            dict(message_params, scope_tenant_id=tenant_id),
        )
        counts["messages_deleted"] = sum(n for _, n in by_tenant)
        if per_tenant is not None:
            per_tenant.add("messages_deleted", by_tenant)
        report(progress, f"purge_retention (dry run): would delete {counts}")
        return counts
    # Each tenant's parts, in this order: (count, statement, parameters, what the progress says).
    parts = (
        ("memories_deleted", DELETE_MEMORIES, memory_params, "memories"),
        ("messages_deleted", DELETE_MESSAGES, message_params, "messages of ended threads"),
        ("events_deleted", DELETE_EVENTS, event_params, "events"),
        ("reads_deleted", DELETE_READS, reads_params, "read counts"),
    )
    counts = dict.fromkeys((key for key, *_ in parts), 0)
    for (each_tenant,) in fetch_all(
        "SELECT id FROM accounts_tenant WHERE %(scope)s::bigint IS NULL OR id = %(scope)s "
        "ORDER BY id",
        {"scope": tenant_id},
    ):
        for key, sql, params, what in parts:
            gone = _drain(
                sql,
                dict(params, tenant_id=each_tenant),
                batch_size=batch_size,
                progress=progress,
                label=f"{what} of tenant {each_tenant}",
            )
            counts[key] += gone
            if per_tenant is not None:
                per_tenant.add(key, [(each_tenant, gone)])
    if tenant_id is None:
        delete_stale_counters()
    return {
        **counts,
        "idempotency_deleted": _drain(
            DELETE_IDEMPOTENCY,
            idempotency_params,
            batch_size=batch_size,
            progress=progress,
            label="idempotency records",
            per_tenant=per_tenant,
            key="idempotency_deleted",
        ),
    }

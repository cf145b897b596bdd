"""`prune_memories`: expiry, the age rules of `daily` and `conversation`, and the entry caps.

The rules, all evaluated at one instant `now` (`--now` moves it):

- `expired`: an active memory whose `expires_at` <= now → status `expired`; but one whose
  effective expiry is its category's lifetime (`memories.retention`: the last write + 72 h for
  `daily`, + 24 h for `conversation`) counts under the rule of its category below.
- `daily_pruned`: an active `daily` memory whose last write (`updated_at`) is 72 h or more
  before now → status `expired`, reason "daily memory 72 h after its last write".
- `conversation_ended`: an active `conversation` memory idle (no write, `updated_at`) for 24 h
  or more → status `expired`, reason "conversation idle 24 h". Reads do not keep a
  conversation alive: a lifetime counts from the last write. (Ending a thread explicitly is
  `services.lifecycle.thread_end`'s job.)
- `evicted`: an agent with more live memories than its `entry_cap` (the tenant's workspace
  memories against `workspace_cap`, a subject's user memories against `user_cap`) loses the
  coldest ones — oldest `last_accessed_at`, then
  oldest `updated_at` — non-core first, core only when no non-core remains → status `evicted`.
  "Live" here means what survives the three rules above, so a dry run counts what the real run
  will evict after it has expired the rest.

A memory matching several rules counts once, under the first. `core`, `workspace`, `archival`
and custom categories never age out. Each change bumps `version`, sets `status_changed_at` (the
retention clock) and `updated_at` (as every service change does) and writes one revision
(`system:prune`, `expire` or `evict`, before/after holding the changed fields) in the same
statement.

Concurrency: every batch is ONE statement — pick due rows `FOR UPDATE SKIP LOCKED`, update them
re-checking the due condition, insert their revisions — so a batch is all-or-nothing, two
workers never take the same row, and a memory written meanwhile (locked by its writer, or no
longer due when we look) is left alone.

Scope: a scheduled run covers every tenant; the console's `Run now` passes `tenant_id` and
touches that tenant only (its batches walk the same global indexes, filtered by tenant: due rows
are few between two scheduled runs).

The cap sweep applies the rule of `services.eviction` (its ordering, its per-owner advisory lock,
so it serialises with store-time eviction and with other sweepers, its reason) but in SQL
batches: the service evicts row by row in one transaction, which suits the one or two rows a
store pushes over the cap, not an agent whose cap was just lowered by 100 000, nor a dry run.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, connections, transaction

from memories.clock import resolve_now
from memories.events.record import EVENT_RETURNING, insert_events_sql
from memories.jobs.batches import (
    BEGINNING,
    DEFAULT_BATCH_SIZE,
    PER_TENANT_JSON,
    TENANT_SCOPE,
    Progress,
    TenantCounts,
    batch_execute,
    fetch_all,
    report,
)
from memories.models import Category
from memories.retention import LIFETIMES
from memories.revisions import insert_revisions_sql
from memories.services.eviction import cap_lock_name, cap_reason, eviction_order_sql
from memories.services.sequences import SEQUENCE_KEY_SQL
from memories.services.write_support import advisory_lock

ACTOR = "system:prune"
DAILY_MAX_AGE = LIFETIMES[Category.DAILY]
CONVERSATION_IDLE = LIFETIMES[Category.CONVERSATION]
# An expiry that is the category's lifetime, which the category's own rule counts.
_LIFETIME_EXPIRY = (
    f"(m.category = 'daily' AND m.expires_at = m.updated_at + "
    f"interval '{int(DAILY_MAX_AGE.total_seconds())} seconds') OR "
    f"(m.category = 'conversation' AND m.expires_at = m.updated_at + "
    f"interval '{int(CONVERSATION_IDLE.total_seconds())} seconds')"
)
SAMPLE_IDS = 10  # a dry run names this many ids per rule


@dataclass(frozen=True)
class AgeRule:
    """A rule that retires single memories by a timestamp; `where` is over alias `m`."""

    name: str
    where: str
    order_column: str  # the indexed column the batches walk in order (keyset)
    reason: str


AGE_RULES = (
    AgeRule(
        name="expired",
        where=(
            "m.status = 'active' AND m.expires_at IS NOT NULL AND m.expires_at <= %(now)s "
            f"AND NOT ({_LIFETIME_EXPIRY})"
        ),
        order_column="expires_at",
        reason="past expires_at",
    ),
    AgeRule(
        name="daily_pruned",
        where=("m.status = 'active' AND m.category = 'daily' AND m.updated_at <= %(daily_cutoff)s"),
        order_column="updated_at",
        reason="daily memory 72 h after its last write",
    ),
    AgeRule(
        name="conversation_ended",
        where=(
            "m.status = 'active' AND m.category = 'conversation' "
            "AND m.updated_at <= %(conversation_cutoff)s"
        ),
        order_column="updated_at",
        reason="conversation idle 24 h",
    ),
)

# Live and not due under any age rule: what the caps count.
REMAINING = """
    m.status = 'active'
    AND (m.expires_at IS NULL OR m.expires_at > %(now)s)
    AND NOT (m.category = 'daily' AND m.updated_at <= %(daily_cutoff)s)
    AND NOT (m.category = 'conversation' AND m.updated_at <= %(conversation_cutoff)s)
"""

# Appended to a `changed` CTE (RETURNING EVENT_RETURNING): one revision per changed row,
# its before/after holding the changed fields.
REVISION_PER_CHANGED_ROW = insert_revisions_sql(
    rows="changed c",
    tenant_id="c.tenant_id",
    memory_id="c.id",
    version="c.version",
    actor="%(actor)s",
    change_type="%(change_type)s",
    reason="%(reason)s",
    before="jsonb_build_object('status', 'active', 'version', c.version - 1)",
    after="jsonb_build_object('status', %(status)s::text, 'version', c.version)",
    created_at="%(now)s",
)
# ... and its events (`memories.events.record`): memory.expired / memory.evicted, and
# review.resolved for a pending one, each holding the memory's public object.
EVENTS_PER_CHANGED_ROW = insert_events_sql(
    rows="changed c",
    alias="c",
    event_type="%(event_type)s::text",
    version="c.version",
    occurred_at="%(now)s",
    left_review=True,
)
INSERT_REVISIONS = f"""
    revisions AS (
        {REVISION_PER_CHANGED_ROW}
        RETURNING 1
    ),
    events AS (
        {EVENTS_PER_CHANGED_ROW}
    )
"""

# Sequences (`services.sequences`: their lock before any row's): a batch takes the locks of the
# threads of its candidates (the rows it would pick, read without locking) that are free — a
# try, never a wait, as SKIP LOCKED for rows — and picks no memory of another thread: a busy
# thread's memories wait for the next run. Appended to `WITH`, before `picked`.
FREE_SEQUENCES = f"""
    free AS (
        SELECT k FROM (
            SELECT DISTINCT {SEQUENCE_KEY_SQL.format(t="c")} AS k
            FROM ({{candidates}}) c WHERE c.thread_id IS NOT NULL
        ) keys
        WHERE pg_try_advisory_xact_lock(hashtextextended(k, 0))
    ),"""
IN_FREE_SEQUENCE = (
    f"(m.thread_id IS NULL OR {SEQUENCE_KEY_SQL.format(t='m')} = ANY (ARRAY(SELECT k FROM free)))"
)

AGE_CANDIDATES = """
    SELECT m.tenant_id, m.agent_id, m.subject_id, m.thread_id FROM memories_memory m
    WHERE {where} AND {scope} AND m.{order} >= %(after)s
    ORDER BY m.{order}
    LIMIT %(limit)s"""

AGE_BATCH = f"""
WITH {FREE_SEQUENCES.format(candidates=AGE_CANDIDATES)}
picked AS (
    SELECT m.id, m.{{order}} AS sort_key
    FROM memories_memory m
    WHERE {{where}} AND {{scope}} AND m.{{order}} >= %(after)s AND {IN_FREE_SEQUENCE}
    ORDER BY m.{{order}}
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
),
changed AS (
    UPDATE memories_memory m
    SET status = %(status)s, status_changed_at = %(now)s, updated_at = %(now)s,
        version = m.version + 1
    WHERE m.id = ANY (ARRAY(SELECT id FROM picked)) AND {{where}}
    RETURNING {EVENT_RETURNING}
),
{{insert_revisions}}
SELECT (SELECT count(*) FROM picked), (SELECT max(sort_key) FROM picked),
       (SELECT count(*) FROM revisions), {{per_tenant}}
"""

# Every owner over its cap: agents, workspaces, and subjects (their user memories).
OVER_CAP_OWNERS = f"""
SELECT o.tenant_id, o.agent_id, o.subject_id, o.live,
       CASE WHEN o.subject_id IS NOT NULL THEN t.user_cap
            ELSE COALESCE(a.entry_cap, t.workspace_cap) END AS cap,
       t.slug, COALESCE(a.slug, 'user:' || o.subject_id, 'workspace')
FROM (
    SELECT m.tenant_id, m.agent_id, NULL::varchar AS subject_id, count(*) AS live
    FROM memories_memory m
    WHERE {REMAINING} AND {TENANT_SCOPE}
        AND (m.agent_id IS NOT NULL OR m.category = 'workspace')
    GROUP BY m.tenant_id, m.agent_id
    UNION ALL
    SELECT m.tenant_id, NULL, m.subject_id, count(*)
    FROM memories_memory m
    WHERE {REMAINING} AND {TENANT_SCOPE} AND m.scope = 'user'
    GROUP BY m.tenant_id, m.subject_id
) o
JOIN accounts_tenant t ON t.id = o.tenant_id
LEFT JOIN accounts_agent a ON a.id = o.agent_id
WHERE o.live > CASE WHEN o.subject_id IS NOT NULL THEN t.user_cap
                    ELSE COALESCE(a.entry_cap, t.workspace_cap) END
ORDER BY o.tenant_id, o.agent_id NULLS FIRST, o.subject_id NULLS FIRST
"""

# One cap batch for one owner, in one transaction: take the owner's cap lock — the same advisory
# lock `services.eviction` takes at store time — then count and evict under fresh snapshots
# (READ COMMITTED takes one per statement), so a sweep that waited for another sweeper or a
# store counts what they left and never evicts twice.
CAP_OF = "SELECT {cap_column} FROM {owner_table} WHERE id = %(owner_id)s"

COUNT_OWNER = """
SELECT count(*) FROM memories_memory m
WHERE m.tenant_id = %(tenant_id)s AND {owner_match} AND {remaining}
"""

EVICT_CANDIDATES = """
    SELECT m.tenant_id, m.agent_id, m.subject_id, m.thread_id FROM memories_memory m
    WHERE m.tenant_id = %(tenant_id)s AND {owner_match} AND {remaining}
    ORDER BY {eviction_order}
    LIMIT %(limit)s"""

EVICT_BATCH = f"""
WITH {FREE_SEQUENCES.format(candidates=EVICT_CANDIDATES)}
picked AS (
    SELECT m.id
    FROM memories_memory m
    WHERE m.tenant_id = %(tenant_id)s AND {{owner_match}} AND {{remaining}} AND {IN_FREE_SEQUENCE}
    ORDER BY {{eviction_order}}
    LIMIT %(limit)s
    FOR UPDATE OF m SKIP LOCKED
),
changed AS (
    UPDATE memories_memory m
    SET status = %(status)s, status_changed_at = %(now)s, updated_at = %(now)s,
        version = m.version + 1
    WHERE m.id = ANY (ARRAY(SELECT id FROM picked)) AND m.status = 'active'
    RETURNING {EVENT_RETURNING}
),
{{insert_revisions}}
SELECT count(*) FROM revisions
"""


def _params(now: datetime, tenant_id: int | None) -> dict:
    return {
        "scope_tenant_id": tenant_id,
        "now": now,
        "daily_cutoff": now - DAILY_MAX_AGE,
        "conversation_cutoff": now - CONVERSATION_IDLE,
        "actor": ACTOR,
    }


def _run_age_rule(
    rule: AgeRule, params: dict, *, batch_size: int, progress, per_tenant: TenantCounts | None
) -> int:
    sql = AGE_BATCH.format(
        order=rule.order_column,
        where=rule.where,
        scope=TENANT_SCOPE,
        insert_revisions=INSERT_REVISIONS,
        per_tenant=PER_TENANT_JSON.format(rows="changed"),
    )
    batch_params = dict(
        params,
        change_type="expire",
        event_type="memory.expired",
        status="expired",
        reason=rule.reason,
        limit=batch_size,
    )
    after, total, batch = BEGINNING, 0, 0
    while True:
        picked, last_key, changed, by_tenant = batch_execute(sql, dict(batch_params, after=after))
        if picked == 0:
            break
        if per_tenant is not None:
            per_tenant.add_json(rule.name, by_tenant)
        batch += 1
        total += changed
        report(progress, f"prune: {rule.name} batch {batch}: {changed} changed ({total} so far)")
        if picked < batch_size:
            break  # the index range is exhausted; rows skipped as locked wait for the next run
        # `>=` (not `>`): rows sharing the last key that we skipped are looked at again;
        # those we changed no longer match, so every batch makes progress.
        after = last_key
    return total


@dataclass(frozen=True)
class CapSql:
    cap: str
    count: str
    evict: str


def _cap_sql(agent_id: int | None, subject_id: str | None) -> CapSql:
    if subject_id is not None:
        table, cap_column = "accounts_tenant", "user_cap"
        match = "m.agent_id IS NULL AND m.scope = 'user' AND m.subject_id = %(subject_id)s"
    elif agent_id is None:
        table, cap_column = "accounts_tenant", "workspace_cap"
        match = "m.agent_id IS NULL AND m.category = 'workspace'"
    else:
        table, cap_column, match = "accounts_agent", "entry_cap", "m.agent_id = %(agent_id)s"
    return CapSql(
        cap=CAP_OF.format(cap_column=cap_column, owner_table=table),
        count=COUNT_OWNER.format(owner_match=match, remaining=REMAINING),
        evict=EVICT_BATCH.format(
            owner_match=match,
            remaining=REMAINING,
            eviction_order=eviction_order_sql("m"),
            insert_revisions=INSERT_REVISIONS,
        ),
    )


def _evict_batch(sql: CapSql, params: dict, batch_size: int) -> tuple[int, int]:
    """One transaction: returns (excess seen under the owner lock, rows evicted)."""
    with transaction.atomic(), connection.cursor() as cursor:
        advisory_lock(cap_lock_name(params["tenant_id"], params["agent_id"], params["subject_id"]))
        cursor.execute(sql.cap, params)
        row = cursor.fetchone()
        if row is None:  # the owner was deleted meanwhile (its memories with it)
            return 0, 0
        cursor.execute(sql.count, params)
        excess = cursor.fetchone()[0] - row[0]
        if excess <= 0:
            return 0, 0
        cursor.execute(sql.evict, dict(params, limit=min(batch_size, excess)))
        return excess, cursor.fetchone()[0]


def _enforce_cap(
    owner: tuple, params: dict, *, batch_size: int, progress, per_tenant: TenantCounts | None
) -> int:
    tenant_id, agent_id, subject_id, _live, cap, tenant_slug, owner_slug = owner
    label = f"{tenant_slug}/{owner_slug}"
    batch_params = dict(
        params,
        change_type="evict",
        event_type="memory.evicted",
        status="evicted",
        reason=cap_reason(workspace=agent_id is None, cap=cap, user=subject_id is not None),
        tenant_id=tenant_id,
        agent_id=agent_id,
        subject_id=subject_id,
        owner_id=agent_id if agent_id is not None else tenant_id,
    )
    sql = _cap_sql(agent_id, subject_id)
    total = 0
    while True:
        excess, changed = _evict_batch(sql, batch_params, batch_size)
        if changed:
            total += changed
            report(progress, f"prune: evicted {label}: {changed} changed ({total} so far)")
        # Done when under the cap, or when every candidate left is locked by a writer.
        if changed == 0 or changed >= excess:
            if per_tenant is not None:
                per_tenant.add("evicted", [(tenant_id, total)])
            return total


def prune_memories(
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    workers: int = 1,
    tenant_id: int | None = None,
    per_tenant: TenantCounts | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Apply the prune rules at `now`; return the counts (a dry run counts, changes nothing).

    `tenant_id` limits the run to one tenant (the console's `Run now`); without it the run
    covers every tenant and, given `per_tenant`, records each tenant's share of the counts.
    `workers` > 1 runs the age rules on that many connections at once (SKIP LOCKED shares the
    rows out); each needs its own database connection, so data must be committed.
    """
    now = resolve_now(now)
    params = _params(now, tenant_id)
    if dry_run:
        return _dry_run(params, progress=progress, per_tenant=per_tenant)
    counts: dict[str, int] = {}
    for rule in AGE_RULES:
        counts[rule.name] = _in_parallel(
            lambda rule=rule: _run_age_rule(  # type: ignore[misc]
                rule, params, batch_size=batch_size, progress=progress, per_tenant=per_tenant
            ),
            workers,
        )
    counts["evicted"] = sum(
        _enforce_cap(owner, params, batch_size=batch_size, progress=progress, per_tenant=per_tenant)
        for owner in fetch_all(OVER_CAP_OWNERS, params)
    )
    counts["total"] = sum(counts.values())
    return counts


def _in_parallel(work: Callable[[], int], workers: int) -> int:
    """Run `work` on `workers` threads (one connection each) and add up what they return."""
    if workers <= 1:
        return work()
    results: list[int] = []
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            results.append(work())
        except BaseException as exc:  # re-raised in the caller's thread
            errors.append(exc)
        finally:
            connections.close_all()  # this thread's connection only

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return sum(results)


def _dry_run(
    params: dict, *, progress: Progress | None, per_tenant: TenantCounts | None
) -> dict[str, int]:
    counts: dict[str, int] = {}
    claimed = "FALSE"  # a memory counts under the first rule it matches, as in the real run
    for rule in AGE_RULES:
        where = f"({rule.where}) AND NOT ({claimed}) AND {TENANT_SCOPE}"
        by_tenant = fetch_all(
            f"SELECT m.tenant_id, count(*) FROM memories_memory m WHERE {where} "
            "GROUP BY m.tenant_id",
            params,
        )
        counts[rule.name] = sum(n for _, n in by_tenant)
        if per_tenant is not None:
            per_tenant.add(rule.name, by_tenant)
        sample = [
            row[0]
            for row in fetch_all(
                f"SELECT m.id FROM memories_memory m WHERE {where} "
                f"ORDER BY m.{rule.order_column} LIMIT {SAMPLE_IDS}",
                params,
            )
        ]
        more = (
            f" and {counts[rule.name] - len(sample)} more"
            if counts[rule.name] > len(sample)
            else ""
        )
        report(
            progress,
            f"prune (dry run): would mark {counts[rule.name]} {rule.name} "
            f"({rule.reason}): {', '.join(sample) or '-'}{more}",
        )
        claimed = f"{claimed} OR ({rule.where})"
    evicted = 0
    for tenant_id, agent_id, subject_id, live, cap, tenant_slug, owner_slug in fetch_all(
        OVER_CAP_OWNERS, params
    ):
        evicted += live - cap
        if per_tenant is not None:
            per_tenant.add("evicted", [(tenant_id, live - cap)])
        which = (
            "user_cap"
            if subject_id is not None
            else "entry_cap"
            if agent_id is not None
            else "workspace_cap"
        )
        report(
            progress,
            f"prune (dry run): would evict {live - cap} of {tenant_slug}/{owner_slug} "
            f"({live} live over {which} {cap})",
        )
    counts["evicted"] = evicted
    counts["total"] = sum(counts.values())
    return counts

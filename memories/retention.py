"""A memory's effective expiry: THE rule, in Python for the writes and in SQL
for the recompute after a policy change (tests/memories/test_retention.py holds them equal).

effective `expires_at` = the earliest of
- what the writer asked for (`requested_expires_at`: `ttl`, `expires_at`, the agent's default
  TTL), already capped at the last write + its API key's `memory_ttl` (`requested_expiry`);
- the last write (`updated_at`) + the owner's `max_retention` for the memory's category (an
  agent's entry wins over its tenant's; a workspace or user memory has no owning agent: its
  tenant's policy applies);
- the last write + the category's lifetime: `daily` 72 h, `conversation` 24 h.

It is stored on the row with every write, so "live" stays `status = 'active' AND (expires_at
IS NULL OR expires_at > now)`, one indexed comparison on every read path (recall, list, search,
hydrate), where a per-row computation of categories and policies would defeat the indexes.
A policy change recomputes the stored expiry of the memories it governs
(`expiry_recompute`), in the same transaction. A TTL can shorten the effective expiry, never
extend it, and `expires_at: null` asks for no expiry of its own: the policies still apply.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memories.models import Category, Memory

# The category lifetimes, counted from the last write (the prune job applies them too).
LIFETIMES: dict[str, timedelta] = {
    Category.DAILY: timedelta(hours=72),
    Category.CONVERSATION: timedelta(hours=24),
}


def retention_of(tenant: Tenant, owner: Agent | None, category: str) -> timedelta | None:
    """The `max_retention` that governs a memory of `category` owned by `owner` (None: the
    workspace's or a subject's)."""
    seconds = None
    if owner is not None:
        seconds = owner.max_retention.get(category)
    if seconds is None:
        seconds = tenant.max_retention.get(category)
    return None if seconds is None else timedelta(seconds=seconds)


def effective_expiry(
    *,
    requested: datetime | None,
    last_write: datetime,
    category: str,
    tenant: Tenant,
    owner: Agent | None,
) -> datetime | None:
    """The earliest of what was asked for, the retention policy and the category's lifetime."""
    bounds = [requested]
    retention = retention_of(tenant, owner, category)
    if retention is not None:
        bounds.append(last_write + retention)
    if category in LIFETIMES:
        bounds.append(last_write + LIFETIMES[category])
    present = [bound for bound in bounds if bound is not None]
    return min(present) if present else None


def requested_expiry(
    requested: datetime | None, *, principal: Principal | None, now: datetime
) -> datetime | None:
    """What a write through `principal`'s key may ask for: at most its key's `memory_ttl`
    after now (`expires_at: null` included)."""
    key = principal.api_key if principal is not None else None
    ttl = key.memory_ttl if key is not None else None
    if ttl is None:
        return requested
    cap = now + ttl
    return cap if requested is None or requested > cap else requested


def memory_expiry(memory: Memory, values: dict, now: datetime) -> datetime | None:
    """The effective expiry of `memory` once `values` (a write's columns) are applied at `now`.
    Its owner and tenant come from the row's loaded relations (writers load them with the
    row: `select_related`, or the principal's own objects)."""
    category = values.get("category", memory.category)
    requested = values.get("requested_expires_at", memory.requested_expires_at)
    owner = memory.agent if memory.agent_id is not None else None
    return effective_expiry(
        requested=requested, last_write=now, category=category, tenant=memory.tenant, owner=owner
    )


# --- the same rule in SQL ------------------------------------------------------------------------

_LIFETIME_SQL = " ".join(
    f"WHEN '{category}' THEN interval '{int(lifetime.total_seconds())} seconds'"
    for category, lifetime in LIFETIMES.items()
)


def expiry_sql(m: str = "m") -> str:
    """`effective_expiry` of the memory row aliased `m`, with its owner's and tenant's policies
    read by their ids (an agent's entry for the category wins)."""
    retention = (
        "COALESCE("
        f"(SELECT (a.max_retention ->> {m}.category)::float8 FROM accounts_agent a "
        f"WHERE a.id = {m}.agent_id), "
        f"(SELECT (t.max_retention ->> {m}.category)::float8 FROM accounts_tenant t "
        f"WHERE t.id = {m}.tenant_id))"
    )
    return (
        f"LEAST({m}.requested_expires_at, "
        f"{m}.updated_at + make_interval(secs => {retention}), "
        f"{m}.updated_at + CASE {m}.category {_LIFETIME_SQL} END)"
    )


def expiry_recompute(*, tenant: Tenant, categories: list[str], agent: Agent | None = None) -> int:
    """After a policy change: store the effective expiry of the tenant's active memories of
    `categories` again (only the agent's with `agent`; every owner's without). Not a change of
    the memories (no version, no revision): the policy changed, not them. Returns how many
    memories' expiry moved."""
    if not categories:
        return 0
    owner = "AND m.agent_id = %s" if agent is not None else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Memory._meta.db_table} m SET expires_at = {expiry_sql('m')} "
            f"WHERE m.tenant_id = %s AND m.status = 'active' AND m.category = ANY(%s) {owner} "
            f"AND m.expires_at IS DISTINCT FROM {expiry_sql('m')}",
            [tenant.pk, sorted(categories), *([agent.pk] if agent is not None else [])],
        )
        return cursor.rowcount

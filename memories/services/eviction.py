"""Entry caps: when an owner's live memories exceed its cap, the coldest go.

An owner is an agent (against its `entry_cap`), the tenant's workspace (its workspace
memories against `tenant.workspace_cap`) or one subject (its user memories, against
`tenant.user_cap`: `user_subject`). The rule lives here once and has two users: the
store-time eviction below, row by row in the storing transaction, and the prune job's cap sweep
(`memories.jobs.prune`), in SQL batches. Both order victims by `eviction_order*`, take the
owner's `cap_lock` and give the same reason, so they serialise and agree.

Evictions are recorded with the actor `system:cap` whoever triggered them: the agent asked to
store a fact, the policy chose what to drop.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, OrderBy, Q

from accounts.models import Agent, Tenant
from memories.clock import resolve_now
from memories.models import Category, ChangeType, Memory, OwnerCount, Status
from memories.services.sequences import lock_rows
from memories.services.write_support import advisory_lock
from memories.services.writes import status_change
from memories.visibility import user_q

CAP_ACTOR = "system:cap"

# Coldest first: oldest `last_accessed_at`, then oldest `updated_at` (the id breaks ties), and
# every non-core memory before any `core` one.
_COLDEST_FIRST = ("last_accessed_at", "updated_at", "id")


def eviction_order() -> list[OrderBy | str]:
    """The eviction order for `QuerySet.order_by`."""
    is_core = ExpressionWrapper(Q(category=Category.CORE), output_field=BooleanField())
    return [is_core.asc(), *_COLDEST_FIRST]


def eviction_order_sql(alias: str) -> str:
    """The same order as an SQL `ORDER BY` list over the memories table aliased `alias`."""
    return ", ".join(
        [f"({alias}.category = '{Category.CORE}')", *(f"{alias}.{c}" for c in _COLDEST_FIRST)]
    )


def cap_lock_name(tenant_id: int, agent_id: int | None, user_subject: str | None = None) -> str:
    """The owner's cap lock (advisory): `cap:<tenant>:<agent|workspace|user:<subject>>`."""
    if user_subject is not None:
        return f"cap:{tenant_id}:user:{user_subject}"
    return f"cap:{tenant_id}:{agent_id if agent_id is not None else 'workspace'}"


def cap_reason(*, workspace: bool, cap: int, user: bool = False) -> str:
    """The reason an eviction's revision gives."""
    which = "user" if user else "workspace" if workspace else "entry"
    return f"{which} cap of {cap} reached"


def owner_cap(tenant: Tenant, agent: Agent | None, user_subject: str | None = None) -> int:
    """The cap of an owner: the agent's `entry_cap`, the subject's `user_cap`, the workspace's."""
    if user_subject is not None:
        return tenant.user_cap
    return agent.entry_cap if agent is not None else tenant.workspace_cap


def cap_lock(tenant: Tenant, agent: Agent | None, user_subject: str | None = None) -> None:
    """The owner's cap lock (transaction-level; the prune job's cap sweep takes the same one).

    Take it before changing any of the owner's memories in a transaction that will check the
    cap: the change locks the owner's counter row (memories_ownercount), and the sweep takes the
    cap lock first and the counter row second, so the other order could deadlock.
    """
    advisory_lock(cap_lock_name(tenant.pk, agent.pk if agent else None, user_subject))


def memory_evict_over_cap(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    actor: str = CAP_ACTOR,
    now: datetime | None = None,
    user_subject: str | None = None,
) -> int:
    """Evict the coldest live memories while the owner is over its cap; returns how many.

    `agent` None means the tenant's workspace memories against `tenant.workspace_cap`, or with
    `user_subject` that subject's user memories against `tenant.user_cap`.
    Coldest = oldest `last_accessed_at`, then oldest `updated_at`; non-core memories go first,
    a `core` one only when no non-core is left.
    """
    with transaction.atomic():
        return evict_over_cap(
            tenant=tenant,
            agent=agent,
            actor=actor,
            now=resolve_now(now),
            user_subject=user_subject,
        )


def evict_over_cap(
    *,
    tenant: Tenant,
    agent: Agent | None,
    now: datetime,
    actor: str = CAP_ACTOR,
    exclude_ids: list[str] | tuple[str, ...] = (),
    cap_locked: bool = False,
    user_subject: str | None = None,
    active: Callable[[], int | None] | None = None,
) -> int:
    """`memory_evict_over_cap` inside the caller's transaction (after its write), never evicting
    `exclude_ids` (the memory just stored or restored). `cap_locked`: the caller took the
    owner's `cap_lock` in this transaction already (before its write, as it must). `active`:
    the owner's `active_count_sent`, sent by the caller after its write (with it: a store)."""
    # One owner's cap is enforced by one transaction at a time, so two concurrent stores cannot
    # both see room for themselves.
    if not cap_locked:
        cap_lock(tenant, agent, user_subject)
    cap = owner_cap(tenant, agent, user_subject)
    # The trigger-kept active count bounds the live count (live ≤ active): the common answer,
    # "not over", costs one row read (written out: the queryset cost more than the read).
    count = (active or active_count_sent(tenant, agent, user_subject))()
    if count is not None and count <= cap:
        return 0
    # Only an owner that may be over its cap is counted.
    live = Memory.objects.for_tenant(tenant).live(now)
    if user_subject is not None:
        live = live.filter(user_q(user_subject))
    elif agent is not None:
        live = live.filter(agent=agent)
    else:
        live = live.filter(agent__isnull=True, category=Category.WORKSPACE)
    excess = live.count() - cap
    if excess <= 0:
        return 0
    victims = lock_rows(
        live.exclude(pk__in=list(exclude_ids)).order_by(*eviction_order()),
        limit=excess,
        skip_locked=True,
    )
    for memory in victims:
        status_change(
            memory,
            status=Status.EVICTED,
            actor=actor,
            change_type=ChangeType.EVICT,
            reason=cap_reason(workspace=agent is None, cap=cap, user=user_subject is not None),
            now=now,
        )
    return len(victims)


def active_count_sent(
    tenant: Tenant, agent: Agent | None, user_subject: str | None = None
) -> Callable[[], int | None]:
    """The owner's trigger-kept active count (None: no row yet), its statement executed; the
    function returned reads it (after a pipeline's end: `memoryhub.pipeline`)."""
    cursor = connection.cursor()
    cursor.execute(
        f"SELECT active FROM {OwnerCount._meta.db_table} WHERE tenant_id = %s "
        "AND owner_id = %s AND subject_id = %s",
        [tenant.pk, *_counter(agent, user_subject)],
    )

    def read() -> int | None:
        with cursor:
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    return read


def _counter(agent: Agent | None, user_subject: str | None) -> tuple[int, str]:
    """The owner's row of `memories_ownercount` (owner id, subject), as its triggers key it."""
    if user_subject is not None:
        return OwnerCount.USER_OWNER, user_subject
    return (agent.pk if agent is not None else 0), ""

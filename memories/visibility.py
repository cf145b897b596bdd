"""Who may see which memory: the one visibility rule every agent-facing read uses.

An agent (through its key) sees, within its tenant:
- its own memories (`source: own`);
- workspace memories, owned by the tenant (`agent` NULL, `source: workspace`);
- the user memories of the request's subject (`scope: user`, `agent` NULL, `source: user`):
  they belong to the subject across every agent of the tenant;
- memories of the agents named in its `reads_from`, except their `conversation` memories
  (`source: shared:<slug>`), and only when `include_shared` is true;
and of those, only the ones that are live (active, not past `expires_at`: the effective expiry,
`memories.retention`) and whose subject is NULL or the request's subject. A request that names
no subject sees subject-less memories only (so no user memory at all), so one end user's facts
never reach another's context by omission. `conversation` memories are further limited to the
request's `thread_id` by the reads that load context (hydrate).

What an agent may change (`owned_q`) is what it sees but the shared agents' memories: its own,
the workspace's, and its subject's user memories.

Memory formation is narrower: a conversation of an agent with one end user may
change only what that agent holds for that end user (`formation_q`); the rest of what the agent
owns and sees (subject-less and workspace memories) is shown to the model read-only
(`formation_shown_q`), and anything else never reaches the model.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import BooleanField, Case, Q, Value, When

from accounts.models import Agent, Tenant
from memories.clock import resolve_now
from memories.models import Category, Event, Memory, MemoryQuerySet, Scope


def reads_from_ids(agent: Agent) -> list[int]:
    cached = getattr(agent, "_reads_from_ids", None)
    if cached is None:
        cached = list(agent.reads_from.values_list("pk", flat=True))
        agent._reads_from_ids = cached
    return cached


def user_q(subject_id: str) -> Q:
    """The subject's user memories (no agent: the `agent` condition lets the planner use the
    indexes of owner-less memories)."""
    return Q(agent__isnull=True, scope=Scope.USER, subject_id=subject_id)


# The owners of `visible_memories_by_owner`'s parts, in its order.
OWN, WORKSPACE, USER, SHARED = "own", "workspace", "user", "shared"


def _owner_parts(agent: Agent, include_shared: bool, subject_id: str | None) -> list[tuple[str, Q]]:
    """The owners whose memories the agent sees, one condition each: its own, the workspace's,
    the subject's (its user memories, when there is a subject), and (with `include_shared`) the
    non-conversation ones of the agents it reads from."""
    owners = [
        (OWN, Q(agent_id=agent.pk)),
        (WORKSPACE, Q(agent__isnull=True, category=Category.WORKSPACE)),
    ]
    if subject_id:
        owners.append((USER, user_q(subject_id)))
    shared = reads_from_ids(agent) if include_shared else []
    if shared:
        owners.append((SHARED, Q(agent_id__in=shared) & ~Q(category=Category.CONVERSATION)))
    return owners


def _owner_qs(agent: Agent, include_shared: bool, subject_id: str | None) -> list[Q]:
    return [q for _, q in _owner_parts(agent, include_shared, subject_id)]


def _subject_q(subject_id: str | None) -> Q:
    """Of no subject, or of this one."""
    subjects = Q(subject_id__isnull=True)
    if subject_id:
        subjects |= Q(subject_id=subject_id)
    return subjects


def visible_q(*, agent: Agent, subject_id: str | None, include_shared: bool = True) -> Q:
    """The owner/subject rule: the agent's own, the workspace's and the subject's user memories
    (and, with `include_shared`, the non-conversation ones of the agents it reads from), of no
    subject or of this one. Liveness is `MemoryQuerySet.live`'s."""
    owners = Q()
    for owner in _owner_qs(agent, include_shared, subject_id):
        owners |= owner
    return owners & _subject_q(subject_id)


def owned_q(*, agent: Agent, subject_id: str | None) -> Q:
    """The memories this agent may change: the visible ones without the shared ones (those are
    read-only to it)."""
    return visible_q(agent=agent, subject_id=subject_id, include_shared=False)


def _exact_subject_q(subject_id: str | None) -> Q:
    """Of exactly this subject: subject-less when there is none."""
    return Q(subject_id=subject_id) if subject_id else Q(subject_id__isnull=True)


def formation_q(*, agent: Agent, subject_id: str | None) -> Q:
    """THE formation scope: what an extraction run over a thread of `agent` for
    `subject_id` may update, forget or confirm, and where its `add`s look for near duplicates
    (and tombstones): the agent's own memories of exactly the thread's subject, other than
    `conversation` memories (those belong to the thread that wrote them, and a durable fact
    must not be absorbed by one that dies with its thread).

    A thread without a subject is the agent's own, not any end user's: its subject is "none",
    so its scope is the agent's subject-less memories. Such a thread can only be written by a
    key not bound to a subject, the same key that may change those memories through the API.

    The subject's user-scoped memories are the subject's as well: a thread with a
    subject may change them. Workspace memories (tenant-wide), subject-less ones when the thread
    has a subject, and other agents' are outside it: an `add` never creates a workspace memory
    either. Liveness is `MemoryQuerySet.live`'s."""
    mine = Q(agent_id=agent.pk) & _exact_subject_q(subject_id)
    if subject_id:
        mine |= user_q(subject_id)
    return mine & ~Q(category=Category.CONVERSATION)


def formation_known_q(*, agent: Agent, subject_id: str | None) -> Q:
    """What an extraction's operation may name and be dropped as `out_of_scope` (outside
    `formation_q`) rather than `invalid` (no memory the agent could change: the API's 404):
    what the agent may change for the thread's subject (`owned_q`), and the tenant's user
    memories of every subject (the kind of memory formation may change, of another person)."""
    return owned_q(agent=agent, subject_id=subject_id) | Q(agent__isnull=True, scope=Scope.USER)


def formation_changeable(*, agent: Agent, subject_id: str | None) -> Case:
    """`formation_q` as a boolean column (true or false, never NULL: a workspace memory's NULL
    agent makes the bare condition unknown), for reads that tell shown memories apart."""
    return Case(
        When(formation_q(agent=agent, subject_id=subject_id), then=Value(True)),
        default=Value(False),
        output_field=BooleanField(),
    )


def formation_shown_q(*, agent: Agent, subject_id: str | None) -> Q:
    """What an extraction run may show the model: `formation_q`, and read-only (marked so in
    the prompt, never changed) the rest of what the agent owns and sees for the subject, the
    subject-less and workspace memories (`owned_q`), `conversation` memories excepted. Never
    another subject's, another agent's (not even one it `reads_from`) or another tenant's."""
    return owned_q(agent=agent, subject_id=subject_id) & ~Q(category=Category.CONVERSATION)


def visible_memories(
    *,
    tenant: Tenant | int,
    agent: Agent,
    subject_id: str | None,
    include_shared: bool = True,
    now: datetime | None = None,
) -> MemoryQuerySet:
    """Live memories this agent may read for this subject, tenant-scoped first."""
    return (
        Memory.objects.for_tenant(tenant)
        .live(resolve_now(now))
        .filter(visible_q(agent=agent, subject_id=subject_id, include_shared=include_shared))
    )


def visible_memories_by_owner(
    *,
    tenant: Tenant,
    agent: Agent,
    subject_id: str | None,
    include_shared: bool = True,
    now: datetime | None = None,
) -> list[MemoryQuerySet]:
    """`visible_memories` split by owner: the agent's own, the workspace's, the subject's user
    memories, and the shared agents'. Each part is one owner's condition of `visible_q` (not the OR of them all, whose
    estimate misleads the planner into sorting a whole owner's rows), so together they are
    exactly the visible set (tests hold them to it); apart, each can walk an index newest
    first, which the OR of owners cannot."""
    return [
        part
        for _, part in visible_parts(
            tenant=tenant,
            agent=agent,
            subject_id=subject_id,
            include_shared=include_shared,
            now=now,
        )
    ]


def visible_parts(
    *,
    tenant: Tenant,
    agent: Agent,
    subject_id: str | None,
    include_shared: bool = True,
    now: datetime | None = None,
) -> list[tuple[str, MemoryQuerySet]]:
    """`visible_memories_by_owner`'s parts, each named by its owner (`OWN`, `WORKSPACE`, `USER`,
    `SHARED`): hydrate loads the user's and the agent's core blocks from different parts."""
    base = Memory.objects.for_tenant(tenant).live(resolve_now(now)).filter(_subject_q(subject_id))
    return [(owner, base.filter(q)) for owner, q in _owner_parts(agent, include_shared, subject_id)]


def source_label(
    owned: Memory | Event, agent: Agent | None, slugs: dict[int, str] | None = None
) -> str:
    """A memory's `source`, of the memory or of one of its events (they carry its
    owner and scope): `own`, `workspace`, `user` or `shared:<agent-slug>` as seen by `agent`;
    with no agent (an operator, the tenant's webhooks) `agent:<slug>` names the owner."""
    if owned.scope == Scope.USER:
        return "user"
    if owned.agent_id is None:
        return "workspace"
    if agent is not None and owned.agent_id == agent.pk:
        return "own"
    slug = (slugs or {}).get(owned.agent_id) or owned.agent.slug  # type: ignore[union-attr]
    return f"shared:{slug}" if agent is not None else f"agent:{slug}"

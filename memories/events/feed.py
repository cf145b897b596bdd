"""Reading the change feed: positions, an agent's page, an event as JSON.

Positions. An event's public `id` is its `position`, given after its transaction commits by
`sequence()`: one sequencer at a time (an advisory lock) numbers the committed events that have
none, in insertion order, from `POSITION_SEQUENCE`. So the positions anyone can see are always
a prefix of every position ever given, and:
- a reader that has seen position n never later meets a smaller one (no event is skipped by a
  cursor, whatever order concurrent writers commit in: an id drawn at insert could be);
- a memory's events are numbered in the order of its changes (a change waits for the previous
  one's commit on the memory's row, and inserts its event after it).
A purge that is erasing a memory's earlier events holds their rows; the sequencer leaves them
for its next round (`SKIP LOCKED`) together, so they keep their order too.

Readers (`GET /api/v1/events`, the webhook dispatcher) run the sequencer first, so an event is
readable as soon as its change is committed and someone looks.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memories import validation
from memories.models import EVENT_TYPES, POSITION_SEQUENCE, Event
from memories.serialization import iso
from memories.visibility import source_label, visible_q
from memoryhub.errors import InvalidInput

SEQUENCE_BATCH = 10_000
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
_SEQUENCER_LOCK = "memoryhub:events:sequencer"

_SEQUENCE = f"""
WITH ready AS (
    SELECT e.id FROM {Event._meta.db_table} e
    WHERE e.position IS NULL
    ORDER BY e.id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
),
numbered AS MATERIALIZED (
    SELECT r.id, nextval('{POSITION_SEQUENCE}') AS position
    FROM (SELECT id FROM ready ORDER BY id) r
)
UPDATE {Event._meta.db_table} e SET position = n.position FROM numbered n WHERE e.id = n.id
"""


def sequence(*, batch: int = SEQUENCE_BATCH, wait: bool = False) -> int:
    """Give committed events without a position theirs, in insertion order (up to `batch` of
    them). Another sequencer at work means this one is not needed: without `wait` it returns
    0 at once. Returns how many events it numbered."""
    function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(hashtextextended(%s, 0))", [_SEQUENCER_LOCK])
        if cursor.fetchone()[0] is False:
            return 0
        cursor.execute(_SEQUENCE, [batch])
        return cursor.rowcount


def last_position(tenant_id: int) -> int:
    """The tenant's highest position given so far (0 for none)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT max(position) FROM {Event._meta.db_table} "
            "WHERE tenant_id = %s AND position IS NOT NULL",
            [tenant_id],
        )
        return cursor.fetchone()[0] or 0


def parse_cursor(value: Any) -> int:
    """`after`: a cursor from `next_cursor` (the decimal position); empty: the beginning."""
    if value is None or value == "":
        return 0
    text = str(value).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise InvalidInput("'after' must be a cursor from 'next_cursor'", field="after")
    return int(text)


def parse_types(values: list[str]) -> list[str]:
    """`types`: event types, comma-separated and/or repeated."""
    types = [t.strip() for value in values for t in str(value).split(",") if t.strip()]
    return known_types(types, field="types")


def known_types(types: list[str], *, field: str) -> list[str]:
    """`types` without repeats, each one of EVENT_TYPES (else INVALID_INPUT naming `field`)."""
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown:
        raise InvalidInput(
            f"Unknown event type '{unknown[0][:40]}'",
            field=field,
            details={"allowed": list(EVENT_TYPES)},
        )
    return list(dict.fromkeys(types))


def events_page(
    *,
    principal: Principal,
    after: Any = None,
    types: list[str] | None = None,
    limit: Any = None,
    subject_id: str | None = None,
    include_shared: Any = None,
) -> tuple[list[dict[str, Any]], str]:
    """The events this key may see after the cursor, oldest first, and the cursor to go on
    from (also when the page is empty: poll again with it).

    Visibility is the memories' own rule (`visible_q` over the event's owner, category,
    subject and scope): the agent's own, the workspace's, the request's subject's user
    memories' (whichever agent wrote them), and (with `include_shared`) the shared agents'
    non-conversation events, of no subject or of the request's subject; a key bound to a
    subject acts for it only."""
    principal.require_scope("read")
    position = parse_cursor(after)
    wanted = parse_types(types or [])
    limit = validation.parse_limit(limit, default=DEFAULT_LIMIT, maximum=MAX_LIMIT)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    shared = validation.parse_bool(include_shared, "include_shared", True)
    sequence()
    # Taken first: every position up to it is given and committed, so a short page proves that
    # nothing visible lies between the page's end and it.
    horizon = last_position(principal.tenant.pk)
    rows = (
        Event.objects.for_tenant(principal.tenant)
        .filter(position__gt=position, position__lte=horizon)
        .filter(visible_q(agent=principal.agent, subject_id=subject, include_shared=shared))
        .select_related("agent")
        .order_by("position")
    )
    if wanted:
        rows = rows.filter(type__in=wanted)
    events = list(rows[:limit])
    next_position = events[-1].position if len(events) == limit else max(position, horizon)
    body = [event_json(e, tenant=principal.tenant, viewer=principal.agent) for e in events]
    return body, str(next_position)


def event_json(event: Event, *, tenant: Tenant, viewer: Agent | None) -> dict[str, Any]:
    """The event object of the change feed, with the memory's `scope`; `viewer` is the reading agent
    (None: the tenant's webhook). A memory's object in `data` gets the `source` that viewer
    sees (`visibility.source_label`, as the memory's own reads)."""
    data = event.data
    if event.memory_id is not None and isinstance(data, dict) and "source" in data:
        data = {**data, "source": source_label(event, viewer)}
    return {
        "id": event.position,
        "type": event.type,
        "tenant": tenant.slug,
        "agent": (
            event.agent.slug  # type: ignore[union-attr]  # agent_id is set
            if event.agent_id is not None
            else None
        ),
        "subject_id": event.subject_id,
        "scope": event.scope,
        "memory_id": event.memory_id,
        "version": event.version,
        "occurred_at": iso(event.occurred_at),
        "data": data,
    }

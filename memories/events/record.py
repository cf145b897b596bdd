"""Events are written where the change is, in its transaction.

Every change to a memory writes exactly one revision (`memories.revisions`), so the memory's
events are written with it: `revision_write` runs `memory_events_statement`'s INSERT in the
revision's own statement (a data-modifying WITH), and the jobs' SQL
batches that insert revisions insert the events in the same statement (`insert_events_sql`).
Every write path — services, console actions, formation, erasure, imports, prune and
retention — therefore writes them without a call of its own. A change writes:

- its memory event: `memory.created` (a store, or an import of a new id), `memory.forgotten` (a
  tombstone, a merge), `memory.evicted`, `memory.expired`, `memory.purged` (a purge, or
  retention's deletion), else `memory.updated` (update, correction, confirm, approve, restore,
  an import over an existing id);
- and, when the memory enters or leaves the review queue (active and `pending`),
  `review.pending` or `review.resolved` after it.

`data` is the public memory object as of the change (`serialization.memory_json`; written by
PostgreSQL as `memory_json_sql` in the jobs' SQL). A purge's events, and the earlier events of
a purged memory (`erase_memory_events`), never hold its content. The other events —
`extraction.completed`/`failed` (`memories.formation.runs`), `subject.erased`
(`memories.services.erasure`) — are written by `event_write` at their services, and
`backup.failed`, one per tenant, by the scheduled backup (`memories.jobs.backup`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson
from django.conf import settings
from django.db import connection

from memories.events.nudge import after_commit
from memories.models import Category, ChangeType, Event, ExtractionRun, Memory, ReviewState, Status
from memories.serialization import MEMORY_JSON_COLUMNS, memory_json, memory_json_sql

_MEMORY_EVENT: dict[str, str] = {
    ChangeType.CREATE: "memory.created",
    ChangeType.TOMBSTONE: "memory.forgotten",
    ChangeType.MERGE: "memory.forgotten",
    ChangeType.EVICT: "memory.evicted",
    ChangeType.EXPIRE: "memory.expired",
    ChangeType.PURGE: "memory.purged",
}


def memory_event_type(change_type: str, before: dict | None) -> str:
    if change_type == ChangeType.IMPORT:
        return "memory.created" if before is None else "memory.updated"
    return _MEMORY_EVENT.get(change_type, "memory.updated")


def in_review(state: dict[str, Any] | None) -> bool:
    """In the review queue: active and pending (a revision snapshot, or a memory's fields)."""
    return (
        state is not None
        and state.get("status") == Status.ACTIVE
        and state.get("review_state") == ReviewState.PENDING
    )


def review_event_type(before: dict | None, after: dict | None) -> str | None:
    was, is_now = in_review(before), in_review(after)
    if is_now and not was:
        return "review.pending"
    if was and not is_now:
        return "review.resolved"
    return None


# The event columns written, in this order, by `_INSERT` and `insert_events_sql`.
_COLUMNS = (
    "tenant_id",
    "type",
    "agent_id",
    "category",
    "subject_id",
    "scope",
    "memory_id",
    "version",
    "occurred_at",
    "data",
)
_ROW = "(" + ", ".join(["%s"] * (len(_COLUMNS) - 1)) + ", %s::jsonb)"
_INSERT = f"INSERT INTO {Event._meta.db_table} ({', '.join(_COLUMNS)}) VALUES "


def _row(event: Event) -> list[Any]:
    return [
        event.tenant_id,
        event.type,
        event.agent_id,
        event.category,
        event.subject_id,
        event.scope,
        event.memory_id,
        event.version,
        event.occurred_at,
        orjson.dumps(event.data).decode(),
    ]


def events_insert(events: list[Event]) -> None:
    """Insert `events` in one statement. Written out rather than `bulk_create`, whose compiling
    costs more than the insert on every write; tests/events/test_record.py holds the rows it
    writes equal to `bulk_create`'s."""
    statement = events_insert_statement(events)
    if statement is not None:
        with connection.cursor() as cursor:
            cursor.execute(*statement)


def events_insert_statement(events: list[Event]) -> tuple[str, list] | None:
    """The INSERT of `events_insert` (None when there is nothing to write), for a caller that
    runs it inside a statement of its own (`revisions.revision_write`: a data-modifying WITH of
    the revision's INSERT); the tenants' after-commit nudges are registered here."""
    if not events or settings.MEMORYHUB_BENCH_NO_EVENTS:
        return None
    for tenant_id in {event.tenant_id for event in events}:
        after_commit(tenant_id)
    params: list[Any] = []
    for event in events:
        params.extend(_row(event))
    return _INSERT + ", ".join([_ROW] * len(events)), params


def memory_events(
    memory: Memory,
    *,
    change_type: str,
    before: dict | None,
    after: dict | None,
    now: datetime,
) -> list[Event]:
    """The events of one change to `memory` (its state after the change)."""
    if settings.MEMORYHUB_BENCH_NO_EVENTS:
        return []
    types = [memory_event_type(change_type, before)]
    review = review_event_type(before, after)
    if review is not None:
        types.append(review)
    data = memory_json(memory, agent=memory.agent if memory.agent_id else None)
    return [memory_event(memory, event_type, now=now, data=data) for event_type in types]


def memory_event(
    memory: Memory, event_type: str, *, now: datetime, data: dict | None = None
) -> Event:
    """One event of `memory` as it is now."""
    if data is None:
        data = memory_json(memory, agent=memory.agent if memory.agent_id else None)
    return Event(
        tenant_id=memory.tenant_id,
        type=event_type,
        agent_id=memory.agent_id,
        category=memory.category,
        subject_id=memory.subject_id,
        scope=memory.scope,
        memory_id=memory.pk,
        version=memory.version,
        occurred_at=now,
        data=data,
    )


def memory_events_statement(memory: Memory, **change) -> tuple[str, list] | None:
    """The INSERT of the events of one change (`change` as `memory_events`), for the statement
    that writes its revision (`revisions.revision_write`) to run as well."""
    return events_insert_statement(memory_events(memory, **change))


def memory_events_write_many(changes: Iterable[tuple[Memory, dict]]) -> None:
    """The events of several changes in one statement (an import's batch)."""
    events: list[Event] = []
    for memory, change in changes:
        events.extend(memory_events(memory, **change))
    events_insert(events)


def event_write(
    *,
    tenant_id: int,
    type: str,
    occurred_at: datetime,
    data: dict[str, Any],
    agent_id: int | None = None,
    category: str | None = None,
    subject_id: str | None = None,
) -> None:
    """An event that is not a memory's (extraction runs, subject erasure)."""
    events_insert(
        [
            Event(
                tenant_id=tenant_id,
                type=type,
                agent_id=agent_id,
                category=category,
                subject_id=subject_id,
                occurred_at=occurred_at,
                data=data,
            )
        ]
    )


def extraction_event_write(run: ExtractionRun, *, subject_id: str | None, now: datetime) -> None:
    """`extraction.completed` / `extraction.failed` for a run that just finished (in the
    transaction that records it). A thread is its agent's own: the category `conversation`
    keeps the event from the agents that read from it (`Event`). The error's message is left
    out (it may quote the model's answer); its class is kept."""
    failed = run.state == "failed"
    event_write(
        tenant_id=run.tenant_id,
        type="extraction.failed" if failed else "extraction.completed",
        occurred_at=now,
        agent_id=run.agent_id,
        category=Category.CONVERSATION,
        subject_id=subject_id,
        data={
            "run_id": run.pk,
            "thread_id": run.thread.thread_id,
            "state": run.state,
            "trigger": run.trigger,
            "model": run.model,
            "counts": run.counts,
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
            "error_class": run.error_class if failed else "",
        },
    )


# --- the jobs' SQL ----------------------------------------------------------------------------

# What a CTE that changes memories must return for `insert_events_sql` (and for the revision it
# writes beside): the memory's columns that its public object shows.
EVENT_RETURNING = ", ".join(
    f"m.{column}"
    for column in dict.fromkeys(
        ("id", "tenant_id", "version", "review_state", "scope", *MEMORY_JSON_COLUMNS)
    )
)


def insert_events_sql(
    *,
    rows: str,
    alias: str,
    event_type: str,
    version: str,
    occurred_at: str,
    left_review: bool,
    patch: str = "",
) -> str:
    """`INSERT INTO memories_event … SELECT … FROM <rows>`: the events of the memories a CTE
    changed (`rows`, e.g. `changed c`, with `alias` c, returning EVENT_RETURNING as the rows
    after the change). `event_type` is the memory event's type (an SQL expression); with
    `left_review` (the rows were active before), a pending one also gets `review.resolved`.
    `version` and `occurred_at` are SQL; `patch`, SQL for a jsonb object merged into `data`
    (a deletion's version, a purge's erased fields)."""
    data = f"({memory_json_sql(alias, 'eo', viewer=f'{alias}.agent_id')})::jsonb"
    review = (
        f"CASE WHEN {alias}.review_state = 'pending' THEN 'review.resolved' END"
        if left_review
        else "NULL"
    )
    if patch:
        data = f"{data} || {patch}"
    columns = ", ".join(_COLUMNS)
    return f"""
        INSERT INTO {Event._meta.db_table} ({columns})
        SELECT {alias}.tenant_id, t.type, {alias}.agent_id, {alias}.category,
               {alias}.subject_id, {alias}.scope, {alias}.id, {version}, {occurred_at}, {data}
        FROM {rows}
        LEFT JOIN accounts_agent eo ON eo.id = {alias}.agent_id
        CROSS JOIN LATERAL (VALUES (1, {event_type}), (2, {review})) t(n, type)
        WHERE t.type IS NOT NULL
        ORDER BY {alias}.id, t.n"""


# --- purge --------------------------------------------------------------------------------------


def erase_memory_events(
    *, tenant_id: int, patch: str, memory_id: str | None = None, subject_id: str | None = None
) -> int:
    """Merge `patch` (JSON of the purged fields) into the `data` of a purged memory's events, or
    of every memory event of a subject whose memory is gone (retention deleted it)."""
    table = Event._meta.db_table
    params: list[str | None]
    if memory_id is not None:
        where, params = "memory_id = %s", [memory_id]
    else:
        where = (
            "subject_id = %s AND memory_id IS NOT NULL AND NOT EXISTS "
            f"(SELECT 1 FROM {Memory._meta.db_table} m WHERE m.id = e.memory_id)"
        )
        params = [subject_id]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} e SET data = e.data || %s::jsonb WHERE e.tenant_id = %s AND {where}",
            [patch, tenant_id, *params],
        )
        return cursor.rowcount

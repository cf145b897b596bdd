"""Append-only revision history: every change to a memory writes exactly one row here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memories.clock import resolve_now
from memories.compiled import insert_instance, insert_sql, inserted
from memories.events.record import memory_events_statement
from memories.models import PUBLIC_FIELDS, Memory, MemoryRevision, pending_vector_sql

# What a revision's before/after snapshot records: the public fields but `id` (the revision
# names its memory), `created_at`/`updated_at` (the revision has its own time), `size_bytes`
# (follows from text and data), `agent` and `source` (who owns and who looks, not what the
# memory says). Never the embedding.
SNAPSHOT_FIELDS = tuple(
    name
    for name in PUBLIC_FIELDS
    if name not in {"id", "created_at", "updated_at", "size_bytes", "agent", "source"}
)


def snapshot(memory: Memory) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in SNAPSHOT_FIELDS:
        value = getattr(memory, name)
        out[name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def changed_only(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict, dict]:
    """Reduce two snapshots to the fields that differ (what the console's diff shows)."""
    keys = [k for k in after if before.get(k) != after.get(k)]
    return {k: before.get(k) for k in keys}, {k: after[k] for k in keys}


# A revision row: every column but the id, in the model's order. `revision_build` fills them for
# the services; the jobs' one-statement batches write the same rows in SQL through
# `insert_revisions_sql`.
REVISION_COLUMNS = tuple(
    f.column for f in MemoryRevision._meta.concrete_fields if not f.primary_key
)


def insert_revisions_sql(*, rows: str, **values: str) -> str:
    """`INSERT INTO memories_memoryrevision (…) SELECT … FROM <rows>`: one revision per row of
    `rows` (a table or CTE with its alias), `values` giving the SQL expression of each column
    of REVISION_COLUMNS (as `revision_build`: the memory's version after the change, the
    actor, the change type, a reason, before/after, the time)."""
    if set(values) != set(REVISION_COLUMNS):
        raise ValueError(f"a revision needs exactly the columns {', '.join(REVISION_COLUMNS)}")
    columns = ", ".join(REVISION_COLUMNS)
    expressions = ", ".join(values[column] for column in REVISION_COLUMNS)
    return (
        f"INSERT INTO {MemoryRevision._meta.db_table} ({columns}) SELECT {expressions} FROM {rows}"
    )


def revision_build(
    *,
    memory: Memory,
    actor: str,
    change_type: str,
    reason: str = "",
    before: dict | None = None,
    after: dict | None = None,
    now: datetime | None = None,
) -> MemoryRevision:
    return MemoryRevision(
        tenant_id=memory.tenant_id,
        memory_id=memory.pk,
        version=memory.version,
        actor=actor,
        change_type=change_type,
        reason=reason or "",
        before=before,
        after=after,
        created_at=resolve_now(now),
    )


def revision_write(*, insert: bool = False, **kwargs) -> MemoryRevision:
    """Write one revision (call inside the transaction that made the change), and the change's
    events with it (`memories.events.record`), in one statement. `insert`: the memory is new
    (a store's create), and the same statement inserts it."""
    memory = kwargs["memory"]
    revision = revision_build(**kwargs)
    row = insert_sql(memory) if insert else None
    if insert and row is None:  # a value only the ORM's own save writes
        insert_instance(memory)
    along = [row] if row is not None else []
    events = memory_events_statement(
        memory,
        change_type=revision.change_type,
        before=revision.before,
        after=revision.after,
        now=revision.created_at,
    )
    if events is not None:
        along.append(events)
    vector = pending_vector_sql(memory)  # its vector row, when the write set or removed one
    if vector is not None:
        along.append(vector)
    # One round trip: the memory's and the events' INSERTs ride on the revision's, as
    # data-modifying WITHs (no foreign key between them to order: each is checked by none).
    insert_instance(revision, along=along)
    if row is not None:
        inserted(memory)
    return revision

"""The lock order of sequences (memories/sql/memory_sequences.sql): a sequence's advisory lock before any row lock.

Memories of one owner, subject and `thread_id` form a sequence whose links (`prev_id`, `next_id`,
`context_text`) triggers keep current. An insert takes the sequence's lock (`seq:…`, a
transaction advisory lock) before its row is written, then its trigger rewrites its neighbours'
rows, so it holds the sequence's lock while it waits for their row locks. A write that locked a
row of the sequence first and then waited for the sequence's lock (the update trigger takes it
too) would close a cycle with such an insert: a deadlock. So every write that changes or locks
a memory in a thread takes the lock of its sequence (of both, when it moves) before the row:

- `writes.conditional_update`, the one UPDATE every change of one memory goes through, calls
  `sequence_lock(sequence_keys(memory, fields))` first;
- a write that locks several rows first (`select_for_update`: thread end, eviction, import)
  locks them through `lock_rows`;
- the prune job's SQL batches take only sequences that are free (`SEQUENCE_KEY_SQL`, a try-lock)
  and leave a busy thread's memories for the next run.

Lock order overall: an owner's cap lock (`eviction.cap_lock`), then sequence locks, then rows.
The update trigger locks the sequences again; an advisory lock held already is taken at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet

from memories.models import Memory
from memories.services.write_support import MAX_RETRIES
from memoryhub.errors import Conflict

# The key the triggers lock, over a memories row aliased {t}: the same text as in
# memories/sql/memory_sequences.sql (a test holds them equal). `sequence_key` spells it in Python.
SEQUENCE_KEY_SQL = (
    "concat_ws(':', 'seq', {t}.tenant_id, COALESCE({t}.agent_id, 0), "
    "COALESCE({t}.subject_id, ''), {t}.thread_id)"
)
_KEY_FIELDS = ("tenant_id", "agent_id", "subject_id", "thread_id")


def sequence_key(memory: Memory, values: Mapping[str, Any] | None = None) -> str | None:
    """The sequence `memory` belongs to (with `values` applied), None outside a thread."""
    tenant_id, agent_id, subject_id, thread_id = (
        (values or {}).get(name, getattr(memory, name)) for name in _KEY_FIELDS
    )
    if thread_id is None:
        return None
    return f"seq:{tenant_id}:{agent_id or 0}:{subject_id or ''}:{thread_id}"


def sequence_keys(memory: Memory, values: Mapping[str, Any] | None = None) -> set[str]:
    """The sequences a write of `values` to `memory` touches: the one it leaves and the one it
    joins (the same one unless its thread, subject or owner changes)."""
    keys = {sequence_key(memory), sequence_key(memory, values)}
    keys.discard(None)
    return keys  # type: ignore[return-value]


def sequence_lock(keys: Iterable[str]) -> None:
    """Take these sequences' locks (transaction-level), in one order, in one statement."""
    ordered = sorted(set(keys))
    if not ordered:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(%s::text[]) AS k",
            [ordered],
        )


class _Moved(Exception):
    """A row joined a sequence whose lock is not held between the read and the row lock."""


def lock_rows(
    queryset: QuerySet[Memory], *, limit: int | None = None, skip_locked: bool = False
) -> list[Memory]:
    """`select_for_update` of `queryset` (its first `limit` rows), the locks of their sequences
    taken first. Rows are read once without a lock to learn their sequences; a row that moved
    to another sequence before its row lock was taken has all the row locks undone (a savepoint)
    and the whole is tried again. Rows written meanwhile are left out."""
    held: set[str] = set()
    for _ in range(MAX_RETRIES):
        plain = queryset.values("pk", *_KEY_FIELDS)
        seen = [Memory(**row) for row in (plain[:limit] if limit is not None else plain)]
        keys = {key for key in map(sequence_key, seen) if key is not None}
        sequence_lock(keys - held)
        held |= keys
        try:
            with transaction.atomic():
                rows = list(
                    queryset.filter(pk__in=[m.pk for m in seen]).select_for_update(
                        skip_locked=skip_locked, of=("self",)
                    )
                )
                if any(sequence_key(m) not in held | {None} for m in rows):
                    raise _Moved
                return rows
        except _Moved:
            continue
    raise Conflict("Memories kept moving between threads; try again")

"""Memories' embeddings written in bulk, in their own table (`MemoryVector`).

A writer of one memory sets `memory.embedding` (a list of floats, pgvector's text form, or None
to remove it) with `memory.embedding_model`; its vector row is written by the same round trip
as the memory's revision (`revisions.revision_write` takes `models.pending_vector_sql`), or
right after an ORM save (`Memory.save`). Bulk writers (a tenant's import) write many at once
here; `reembed` writes its batches with one statement of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from memories.models import Memory, MemoryVector
from memories.models.memory import VECTOR_COLUMNS, VECTOR_ROW, VECTOR_UPSERT, vector_row

TABLE = MemoryVector._meta.db_table
COLUMNS = VECTOR_COLUMNS


def write_pending_vectors(memories: Sequence[Memory]) -> None:
    """`write_pending_vector` of many new memories at once (a bulk insert's)."""
    vectors_upsert(
        (memory, memory.__dict__["_embedding"])
        for memory in memories
        if memory.__dict__.pop("_embedding_pending", False)
        and memory.__dict__.get("_embedding") is not None
        and memory.embedding_model
    )


def vectors_upsert(
    rows: Iterable[tuple[Memory, Sequence[float] | str]], *, batch: int = 500
) -> int:
    """Write the vectors of many memories (whose rows exist), `batch` rows a statement; each
    with its memory's `embedding_model`. Returns how many rows were written."""
    written = 0
    chunk: list[Any] = []
    count = 0

    def flush() -> None:
        nonlocal chunk, count
        if count:
            with connection.cursor() as cursor:
                cursor.execute(VECTOR_UPSERT.format(rows=", ".join([VECTOR_ROW] * count)), chunk)
        chunk, count = [], 0

    for memory, vector in rows:
        chunk += vector_row(memory, vector)
        count += 1
        written += 1
        memory.__dict__["_embedding"] = vector
        memory.__dict__.pop("_embedding_pending", None)
        if count >= batch:
            flush()
    flush()
    return written

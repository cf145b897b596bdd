"""Memories' embeddings written in bulk, in their own table (`MemoryVector`).

A writer of one memory sets `memory.embedding` (a list of floats, pgvector's text form, or None
to remove it) with `memory.embedding_model`; its vector row is written by the same round trip
as the memory's revision (`revisions.revision_write` takes `models.pending_vector_sql`), or
right after an ORM save (`Memory.save`). Bulk writers (a tenant's import) write many at once
here; `reembed` writes its batches with one statement of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connection

from memories.models import Memory
from memories.models.memory import VECTOR_ROW, VECTOR_UPSERT, vector_row

BATCH = 500  # vector rows a statement


def write_pending_vectors(memories: Sequence[Memory]) -> None:
    """`Memory.save`'s vector write for many new memories at once (a bulk insert's): the
    vectors set on them, `BATCH` rows a statement."""
    pending = [
        memory
        for memory in memories
        if memory.__dict__.pop("_embedding_pending", False)
        and memory.__dict__.get("_embedding") is not None
        and memory.embedding_model
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(pending), BATCH):
            chunk = pending[start : start + BATCH]
            params = [v for memory in chunk for v in vector_row(memory, memory.embedding)]
            cursor.execute(VECTOR_UPSERT.format(rows=", ".join([VECTOR_ROW] * len(chunk))), params)

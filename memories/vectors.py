"""Memories' embeddings, in their own table (`MemoryVector`): how they are written and read.

A writer sets `memory.embedding` (a list of floats, pgvector's text form, or None to remove it)
with `memory.embedding_model`; the vector row is written by the same round trip as the memory's
revision (`revisions.revision_write` takes `pending_vector_sql`), or right after an ORM save
(`Memory.save`). Bulk writers (imports, `reembed`) write rows with `vectors_upsert`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection

from memories.embeddings import vector_literal
from memories.models import Memory, MemoryVector

TABLE = MemoryVector._meta.db_table
COLUMNS = "memory_id, tenant_id, agent_id, subject_id, model, embedding"
# A memory's owner never changes: a rewrite changes the model and the vector only.
_UPSERT = (
    f"INSERT INTO {TABLE} ({COLUMNS}) VALUES {{rows}} ON CONFLICT (memory_id) DO UPDATE "
    "SET model = EXCLUDED.model, embedding = EXCLUDED.embedding"
)
_ROW = "(%s, %s, %s, %s, %s, %s::vector)"


def _literal(vector: Sequence[float] | str) -> str:
    return vector if isinstance(vector, str) else vector_literal(vector)


def _row(memory: Memory, vector: Sequence[float] | str) -> list[Any]:
    return [
        memory.pk,
        memory.tenant_id,
        memory.agent_id,
        memory.subject_id,
        memory.embedding_model,
        _literal(vector),
    ]


def pending_vector_sql(memory: Memory) -> tuple[str, list[Any]] | None:
    """The statement writing what was set as `memory.embedding` since it was last written (an
    upsert, or a delete for None), or None when nothing was; marks it written."""
    if not memory.__dict__.pop("_embedding_pending", False):
        return None
    vector = memory.__dict__.get("_embedding")
    if vector is None or not memory.embedding_model:
        if memory._state.adding:  # a new memory has no row to remove
            return None
        return f"DELETE FROM {TABLE} WHERE memory_id = %s", [memory.pk]
    return _UPSERT.format(rows=_ROW), _row(memory, vector)


def write_pending_vector(memory: Memory) -> None:
    """Write `pending_vector_sql` now (after the memory's row is written)."""
    statement = pending_vector_sql(memory)
    if statement is not None:
        with connection.cursor() as cursor:
            cursor.execute(*statement)


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
                cursor.execute(_UPSERT.format(rows=", ".join([_ROW] * count)), chunk)
        chunk, count = [], 0

    for memory, vector in rows:
        chunk += _row(memory, vector)
        count += 1
        written += 1
        memory.__dict__["_embedding"] = vector
        memory.__dict__.pop("_embedding_pending", None)
        if count >= batch:
            flush()
    flush()
    return written


def with_embeddings(memories: Iterable[Memory]) -> list[Memory]:
    """`memories` with their vectors loaded as `memory.embedding` (None where none is stored),
    in one query; for the few readers that hand vectors out (exports, the console's
    look-alikes)."""
    memories = list(memories)
    found = dict(
        MemoryVector.objects.filter(memory_id__in=[m.pk for m in memories]).values_list(
            "memory_id", "embedding"
        )
    )
    for memory in memories:
        vector = found.get(memory.pk)
        memory.__dict__["_embedding"] = None if vector is None else [float(x) for x in vector]
        memory.__dict__.pop("_embedding_pending", None)
    return memories

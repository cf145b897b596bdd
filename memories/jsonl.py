"""JSONL backup of a tenant's memories: one JSON object per line, every field.

`export_jsonl` streams through a server-side cursor; `memory_to_record` is one line's object.
Importing such a file is a service: `memories.services.jsonl_import`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from django.db.models import DateTimeField, QuerySet

from memories.models import PUBLIC_FIELDS, Memory
from memoryhub.pooling import stream_rows

CHUNK_SIZE = 500
FORMAT = "memoryhub.memory/1"

# A line holds all of a memory: `id` and `agent` (by slug) open it, the embedding closes it, and
# between them come the public fields (but `source`, the viewer's) and, beyond them, what the
# service reads back itself: the access stamps (eviction), the lifecycle times and tombstone
# (retention, restore), the content hash (dedup, previously_corrected), the embedding's model
# and the provenance. Plain values first, then the timestamps (ISO 8601); `access_count` sits
# before `version`, where backup lines have always had it.
_PUBLIC = [name for name in PUBLIC_FIELDS if name not in ("id", "agent", "source")]
_PUBLIC_TIMESTAMPS = [
    name for name in _PUBLIC if isinstance(Memory._meta.get_field(name), DateTimeField)
]
_PUBLIC_PLAIN = [name for name in _PUBLIC if name not in _PUBLIC_TIMESTAMPS]
_VERSION_AT = _PUBLIC_PLAIN.index("version")
PLAIN_FIELDS = (
    *_PUBLIC_PLAIN[:_VERSION_AT],
    "access_count",
    *_PUBLIC_PLAIN[_VERSION_AT:],
    "content_hash",
    "embedding_model",
    "tombstone_reason",
    "tombstoned_by",
    "created_by",
    "review_reason",
)
DATETIME_FIELDS = (
    *_PUBLIC_TIMESTAMPS,
    "last_accessed_at",
    "status_changed_at",
    "tombstoned_at",
    "purged_at",
)


def memory_to_record(memory: Memory) -> dict[str, Any]:
    record: dict[str, Any] = {"format": FORMAT, "id": memory.pk}
    record["agent"] = memory.agent.slug if memory.agent_id else None  # type: ignore[union-attr]
    for name in PLAIN_FIELDS:
        record[name] = getattr(memory, name)
    for name in DATETIME_FIELDS:
        value = getattr(memory, name)
        record[name] = value.isoformat() if value else None
    embedding = memory.embedding
    record["embedding"] = [float(x) for x in embedding] if embedding is not None else None
    return record


def export_jsonl(memories: QuerySet, *, chunk_size: int = CHUNK_SIZE) -> Iterator[str]:
    for memory in stream_rows(memories.select_related("agent").order_by("id"), chunk_size):
        yield json.dumps(memory_to_record(memory), ensure_ascii=False, separators=(",", ":"))
        yield "\n"

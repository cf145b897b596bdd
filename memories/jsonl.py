"""JSONL backup of a tenant's memories: one JSON object per line, every field.

`export_jsonl` streams through a server-side cursor. `import_jsonl` is idempotent by memory id
(a line whose id already exists in the tenant updates that memory to the line's values) and all
or nothing: every line is validated first, then everything is written in one transaction; a bad
line is reported by its number and nothing of the file is applied.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime

from accounts.models import Agent, Tenant
from memories.ids import is_memory_id
from memories.models import CaptureMode, ChangeType, Memory, MemoryRevision, ReviewState, Status
from memories.revisions import revision_build, snapshot

CHUNK_SIZE = 500
FORMAT = "memoryhub.memory/1"

DATETIME_FIELDS = (
    "expires_at",
    "last_confirmed_at",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "status_changed_at",
    "tombstoned_at",
    "purged_at",
)
PLAIN_FIELDS = (
    "key",
    "category",
    "kind",
    "text",
    "data",
    "tags",
    "subject_id",
    "thread_id",
    "importance",
    "confidence",
    "capture_mode",
    "source_provider",
    "mentions",
    "access_count",
    "version",
    "status",
    "review_state",
    "size_bytes",
    "content_hash",
    "embedding_model",
    "tombstone_reason",
    "tombstoned_by",
    "created_by",
)


class ImportLineError(Exception):
    """A bad line: `line` is 1-based."""

    def __init__(self, line: int, message: str):
        self.line, self.message = line, message
        super().__init__(f"line {line}: {message}")


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def memory_to_record(memory: Memory) -> dict[str, Any]:
    record: dict[str, Any] = {"format": FORMAT, "id": memory.pk}
    record["agent"] = memory.agent.slug if memory.agent_id else None
    for name in PLAIN_FIELDS:
        record[name] = getattr(memory, name)
    for name in DATETIME_FIELDS:
        value = getattr(memory, name)
        record[name] = value.isoformat() if value else None
    embedding = memory.embedding
    record["embedding"] = [float(x) for x in embedding] if embedding is not None else None
    return record


def export_jsonl(memories: QuerySet, *, chunk_size: int = CHUNK_SIZE) -> Iterator[str]:
    for memory in memories.select_related("agent").order_by("id").iterator(chunk_size):
        yield json.dumps(memory_to_record(memory), ensure_ascii=False, separators=(",", ":"))
        yield "\n"


def _parse_line(number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise ImportLineError(number, f"not valid JSON ({exc.msg})") from exc
    if not isinstance(record, dict):
        raise ImportLineError(number, "each line must be a JSON object")
    if not is_memory_id(record.get("id", "")):
        raise ImportLineError(number, "missing or malformed memory id")
    if record.get("status") not in Status.values:
        raise ImportLineError(number, "unknown status")
    if record.get("review_state", "none") not in ReviewState.values:
        raise ImportLineError(number, "unknown review_state")
    if record.get("capture_mode", "explicit") not in CaptureMode.values:
        raise ImportLineError(number, "unknown capture_mode")
    for name in DATETIME_FIELDS:
        value = record.get(name)
        if value is not None:
            parsed = parse_datetime(value) if isinstance(value, str) else None
            if parsed is None:
                raise ImportLineError(number, f"{name} is not an ISO 8601 timestamp")
            record[name] = parsed
    for name in ("importance", "confidence"):
        value = record.get(name, 0.5)
        if not isinstance(value, int | float) or not 0 <= value <= 1:
            raise ImportLineError(number, f"{name} must be a number between 0 and 1")
    if not isinstance(record.get("tags", []), list):
        raise ImportLineError(number, "tags must be a list")
    embedding = record.get("embedding")
    if embedding is not None and (not isinstance(embedding, list) or len(embedding) != 384):
        raise ImportLineError(number, "embedding must be a list of 384 numbers")
    if not isinstance(record.get("text", ""), str):
        raise ImportLineError(number, "text must be a string")
    return record


def _apply(memory: Memory, record: dict[str, Any], agent: Agent | None) -> None:
    memory.agent = agent
    for name in PLAIN_FIELDS + DATETIME_FIELDS:
        if name in record:
            setattr(memory, name, record[name])
    memory.embedding = record.get("embedding")


def import_jsonl(*, tenant: Tenant, lines: Iterable[str | bytes], actor: str) -> ImportResult:
    """Import a JSONL backup into `tenant`; raises `ImportLineError` (nothing applied) on a bad line."""
    records: list[tuple[int, dict[str, Any]]] = []
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportLineError(number, "not UTF-8") from exc
        if not raw.strip():
            continue
        record = _parse_line(number, raw)
        if record["id"] in seen:
            raise ImportLineError(number, "the same memory id appears twice")
        seen.add(record["id"])
        records.append((number, record))

    result = ImportResult()
    with transaction.atomic():
        agents = {a.slug: a for a in Agent.objects.filter(tenant=tenant)}
        ids = [r["id"] for _, r in records]
        existing = {m.pk: m for m in Memory.objects.filter(pk__in=ids).select_for_update()}
        revisions = []
        for number, record in records:
            slug = record.get("agent")
            agent = None
            if slug:
                agent = agents.get(slug)
                if agent is None:
                    agent = Agent(tenant=tenant, slug=slug, name=slug)
                    try:
                        agent.full_clean(exclude=["tenant", "reads_from"])
                    except Exception as exc:
                        raise ImportLineError(number, "invalid agent slug") from exc
                    agent.save()
                    agents[slug] = agent
            memory = existing.get(record["id"])
            if memory is not None and memory.tenant_id != tenant.pk:
                # Ids are global; do not say whose it is.
                raise ImportLineError(number, "this memory id is already in use")
            if memory is None:
                memory = Memory(pk=record["id"], tenant=tenant)
                before = None
                result.created += 1
            else:
                before = snapshot(memory)
                old = memory_to_record(memory)
                _apply(memory, record, agent)
                if memory_to_record(memory) == old:
                    result.unchanged += 1
                    continue
                result.updated += 1
            _apply(memory, record, agent)
            try:
                memory.full_clean(exclude=["tenant", "agent", "embedding", "search_vector"])
            except Exception as exc:
                raise ImportLineError(number, _first_error(exc)) from exc
            memory.save()
            revisions.append(
                revision_build(
                    memory=memory,
                    actor=actor,
                    change_type=ChangeType.IMPORT,
                    reason="JSONL import",
                    before=before,
                    after=snapshot(memory),
                )
            )
        MemoryRevision.objects.bulk_create(revisions)
    return result


def _first_error(exc: Exception) -> str:
    message_dict = getattr(exc, "message_dict", None)
    if message_dict:
        name, messages = next(iter(message_dict.items()))
        return f"{name}: {messages[0]}"
    return "invalid record"

"""The JSONL files of a tenant: one JSON object per line, each with its `type`.

A file opens with a `header` line (the format, the app version that wrote it, the tenant and
what the file holds: `contents` is `tenant` for a whole tenant, `memories` for a selection of
its memories). A tenant file (`export_tenant`, the console's `Export tenant`) then holds, in
this order: `kind`, `agent` (with its policy), `thread` each followed by its `message`s and
`run`s, `memory` (its current state), `revision` (every revision of the tenant, oldest first)
and `webhook` (no secret) lines. A memories file (`Export JSONL`) holds `memory` lines only.
A line without `type` is a memory line of the files written before the header existed.

Every export streams through server-side cursors in one read-only REPEATABLE READ
transaction, so it is a consistent snapshot in bounded memory. Importing is a service:
`memories.services.jsonl_import` (memories files) and `memories.services.tenant_import`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from django.db import connection, models, transaction
from django.db.models import DateTimeField, QuerySet

from accounts.models import Agent, Tenant
from accounts.services import AGENT_POLICY_FIELDS
from memories.models import (
    PUBLIC_FIELDS,
    ExtractionRun,
    Kind,
    Memory,
    MemoryRevision,
    Message,
    Thread,
    WebhookEndpoint,
)
from memoryhub.version import app_version

CHUNK_SIZE = 500
# The file's format, in its header line: a reader refuses a format it does not know.
FORMAT = "memoryhub.jsonl/1"
TENANT, MEMORIES = "tenant", "memories"  # a header's `contents`
# The order of a tenant file's sections: an import refuses a line out of it.
SECTIONS = ("header", "kind", "agent", "thread", "memory", "revision", "webhook")

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
    "requested_expires_at",
)


def memory_to_record(memory: Memory) -> dict[str, Any]:
    record: dict[str, Any] = {"type": "memory", "id": memory.pk}
    record["agent"] = memory.agent.slug if memory.agent_id else None  # type: ignore[union-attr]
    for name in PLAIN_FIELDS:
        record[name] = getattr(memory, name)
    for name in DATETIME_FIELDS:
        value = getattr(memory, name)
        record[name] = value.isoformat() if value else None
    embedding = memory.embedding
    record["embedding"] = [float(x) for x in embedding] if embedding is not None else None
    return record


def export_jsonl(
    tenant: Tenant, memories: QuerySet, *, chunk_size: int = CHUNK_SIZE
) -> Iterator[str]:
    """A memories file: the header, then a line per memory of `memories` (by id)."""
    with _snapshot():
        yield _line(header(tenant, contents=MEMORIES))
        for memory in (
            memories.select_related("agent", "vector").order_by("id").iterator(chunk_size)
        ):
            yield _line(memory_to_record(memory))


def export_tenant(
    tenant: Tenant, *, chunk_size: int = CHUNK_SIZE, progress: Any = None
) -> Iterator[str]:
    """A tenant file: everything of `tenant` that moves to another instance, a line at a time
    (the module docstring says what and in which order). `progress(type)` is called per line."""
    tick = progress or (lambda kind: None)
    with _snapshot():
        yield _line(header(tenant, contents=TENANT))
        for kind in Kind.objects.for_tenant(tenant).order_by("name"):
            tick("kind")
            yield _line(kind_to_record(kind))
        agents = Agent.objects.for_tenant(tenant).prefetch_related("reads_from").order_by("slug")
        for agent in agents:
            tick("agent")
            yield _line(agent_to_record(agent))
        threads = Thread.objects.for_tenant(tenant).select_related("agent").order_by("id")
        for thread in threads.iterator(chunk_size):
            tick("thread")
            yield _line(thread_to_record(thread))
            messages = Message.objects.for_tenant(tenant).filter(thread=thread).order_by("seq")
            for message in messages.iterator(chunk_size):
                tick("message")
                yield _line(message_to_record(message))
            runs = ExtractionRun.objects.for_tenant(tenant).filter(thread=thread).order_by("id")
            for run in runs.iterator(chunk_size):
                tick("run")
                yield _line(run_to_record(run))
        memories = (
            Memory.objects.for_tenant(tenant).select_related("agent", "vector").order_by("id")
        )
        for memory in memories.iterator(chunk_size):
            tick("memory")
            yield _line(memory_to_record(memory))
        revisions = MemoryRevision.objects.for_tenant(tenant).order_by("id")
        for revision in revisions.iterator(chunk_size):
            tick("revision")
            yield _line(revision_to_record(revision))
        for endpoint in WebhookEndpoint.objects.for_tenant(tenant).order_by("created_at", "id"):
            tick("webhook")
            yield _line(webhook_to_record(endpoint))


def export_counts(tenant: Tenant) -> dict[str, int]:
    """How many lines of each type a tenant file of `tenant` has now (a progress bar's total)."""
    return {
        "memory": Memory.objects.for_tenant(tenant).count(),
        "revision": MemoryRevision.objects.for_tenant(tenant).count(),
    }


@contextmanager
def _snapshot() -> Iterator[None]:
    """One read-only REPEATABLE READ transaction: every line of a file sees the same moment, and
    the server-side cursors of `iterator()` live inside a transaction (as a transaction-mode
    pooler needs them to). Inside a caller's transaction (a test's), that one's snapshot holds."""
    with transaction.atomic():
        if not connection.savepoint_ids:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def header(tenant: Tenant, *, contents: str) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT,
        "contents": contents,
        "app_version": app_version(),
        "tenant": {
            "slug": tenant.slug,
            "name": tenant.name,
            "created_at": _iso(tenant.created_at),
            **{name: getattr(tenant, name) for name in TENANT_SETTINGS},
        },
    }


# A tenant's settings that move with it (its policy and caps).
TENANT_SETTINGS = ("workspace_cap", "user_cap", "max_retention", "extraction_daily_token_budget")
KIND_FIELDS = ("cardinality", "memory_type", "description", "schema", "default_category")


def kind_to_record(kind: Kind) -> dict[str, Any]:
    record = {"type": "kind", "name": kind.name}
    record.update({name: getattr(kind, name) for name in KIND_FIELDS})
    return record | {"created_at": _iso(kind.created_at), "updated_at": _iso(kind.updated_at)}


def agent_to_record(agent: Agent) -> dict[str, Any]:
    policy = {name: getattr(agent, name) for name in AGENT_POLICY_FIELDS}
    ttl = policy["default_ttl"]
    policy["default_ttl"] = None if ttl is None else ttl.total_seconds()
    policy["extraction_categories"] = list(policy["extraction_categories"])
    return {
        "type": "agent",
        "slug": agent.slug,
        "name": agent.name,
        "policy": policy,
        "reads_from": sorted(other.slug for other in agent.reads_from.all()),
        "created_at": _iso(agent.created_at),
        "updated_at": _iso(agent.updated_at),
    }


def row_fields(model: type[models.Model], *, skip: tuple[str, ...]) -> tuple[str, ...]:
    """A model's columns as a line carries them: every concrete field but the row's own id,
    its tenant, the foreign keys a line names otherwise, and `skip`."""
    return tuple(
        field.name
        for field in model._meta.concrete_fields
        if not field.primary_key and not field.is_relation and field.name not in skip
    )


THREAD_FIELDS = row_fields(Thread, skip=())
MESSAGE_FIELDS = row_fields(Message, skip=())
RUN_FIELDS = row_fields(ExtractionRun, skip=())
REVISION_FIELDS = row_fields(MemoryRevision, skip=())
WEBHOOK_FIELDS = (
    "url",
    "events",
    "description",
    "created_by",
    "created_at",
    "disabled_at",
    "disabled_reason",
)


def _row(instance: models.Model, fields: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(instance, name)
        out[name] = _iso(value) if isinstance(value, datetime) else value
    return out


def thread_to_record(thread: Thread) -> dict[str, Any]:
    return {"type": "thread", "agent": thread.agent.slug, **_row(thread, THREAD_FIELDS)}


def message_to_record(message: Message) -> dict[str, Any]:
    return {"type": "message", **_row(message, MESSAGE_FIELDS)}


def run_to_record(run: ExtractionRun) -> dict[str, Any]:
    """A run of the thread before it (its agent is the thread's); `id` is what memories'
    `evidence` names."""
    return {"type": "run", "id": run.pk, **_row(run, RUN_FIELDS)}


def revision_to_record(revision: MemoryRevision) -> dict[str, Any]:
    return {"type": "revision", "memory_id": revision.memory_id, **_row(revision, REVISION_FIELDS)}


def webhook_to_record(endpoint: WebhookEndpoint) -> dict[str, Any]:
    """An endpoint without its secret (an import issues a new one) and without its delivery
    state, which belongs to the events of the instance it ran on."""
    return {"type": "webhook", "id": endpoint.pk, **_row(endpoint, WEBHOOK_FIELDS)}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None

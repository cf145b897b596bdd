"""The compare-and-set core: every change to an existing memory is one conditional
`UPDATE … WHERE id = … AND version = n` plus the one revision it writes, in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from django.db import transaction

from memories import fingerprints, inputs, kind_registry, retention
from memories.cas import Cas
from memories.embeddings import get_embedder
from memories.models import Category, Memory, Status
from memories.revisions import revision_write, snapshot
from memories.services.sequences import sequence_keys, sequence_lock
from memories.services.write_support import MAX_RETRIES, embed_text, embed_texts
from memoryhub.errors import Conflict, InvalidInput, NotFound

_UNCHANGED = object()


def conditional_update(
    memory: Memory,
    *,
    fields: dict[str, Any],
    now: datetime,
    expected_version: int,
    expected_updated_at: datetime | None = None,
) -> bool:
    """The compare-and-set: one UPDATE guarded by the version; applies the values on success.

    The memory's sequence lock comes first (`sequences`: before the row's lock, as an insert
    takes it). The sequences are those of the row as read: if it moved meanwhile its version
    moved too, and the UPDATE changes nothing.

    Every write is a last write: a memory that is (or becomes) active gets its effective expiry
    again (`memories.retention`), from the row's owner and tenant as loaded with it."""
    sequence_lock(sequence_keys(memory, fields))
    rows = Memory.objects.for_tenant(memory.tenant_id).filter(
        pk=memory.pk, version=expected_version
    )
    if expected_updated_at is not None:
        rows = rows.filter(updated_at=expected_updated_at)
    values = {**fields, "version": expected_version + 1, "updated_at": now}
    # The vector is not a column of the row: it is set on the memory, and the revision's
    # statement writes it (`vectors.pending_vector_sql`).
    vector = values.pop("embedding", _UNCHANGED)
    if values.get("status", memory.status) == Status.ACTIVE:
        values["expires_at"] = retention.memory_expiry(memory, values, now)
    if rows.update(**values) != 1:
        return False
    for name, value in values.items():
        setattr(memory, name, value)
    if vector is not _UNCHANGED:
        memory.embedding = vector
    return True


def _write_once(
    memory: Memory,
    *,
    values: dict[str, Any],
    actor: str,
    change_type: str,
    reason: str,
    now: datetime,
    expected_updated_at: datetime | None = None,
) -> bool:
    """One attempt: the compare-and-set at the row's version and, when it wins, the change's
    one revision. False when the row moved on."""
    before = snapshot(memory)
    if not conditional_update(
        memory,
        fields=values,
        now=now,
        expected_version=memory.version,
        expected_updated_at=expected_updated_at,
    ):
        return False
    revision_write(
        memory=memory,
        actor=actor,
        change_type=change_type,
        reason=reason,
        before=before,
        after=snapshot(memory),
        now=now,
    )
    return True


def status_change(
    memory: Memory, *, status: str, actor: str, change_type: str, reason: str, now: datetime
) -> bool:
    """Move a row this transaction has locked to `status` (eviction, thread end)."""
    return _write_once(
        memory,
        values={"status": status, "status_changed_at": now},
        actor=actor,
        change_type=change_type,
        reason=reason,
        now=now,
    )


def current_version(memory_id: str, tenant_id: int) -> int | None:
    return (
        Memory.objects.for_tenant(tenant_id)
        .filter(pk=memory_id)
        .values_list("version", flat=True)
        .first()
    )


def change(
    memory: Memory,
    *,
    fields: dict[str, Any] | Callable[[Memory], dict[str, Any]],
    actor: str,
    change_type: str,
    now: datetime,
    reason: str = "",
    cas: Cas | None = None,
    reload: Callable[[], Memory | None] | None = None,
) -> Memory:
    """Apply `fields` with compare-and-set and write the one revision of this change.

    `fields` may be a function of the current row (computed before the UPDATE, never under a
    lock). With `cas` a lost race is a CONFLICT; without it the write re-reads (`reload()`
    returns the fresh row, or None when it is gone → NOT_FOUND) and tries again.
    """
    for _ in range(MAX_RETRIES):
        if cas is not None:
            change_guard(memory, cas)
        values = fields(memory) if callable(fields) else fields
        with transaction.atomic():
            if _write_once(
                memory,
                values=values,
                actor=actor,
                change_type=change_type,
                reason=reason,
                now=now,
                expected_updated_at=cas.updated_at if cas else None,
            ):
                return memory
            # A lost UPDATE may still have locked the row (READ COMMITTED rechecks the newest
            # version under its lock): undo it, so the next attempt takes the sequence lock of
            # the row as it is now before that row's lock (`sequences`).
            transaction.set_rollback(True)
        if cas is not None:
            current = current_version(memory.pk, memory.tenant_id)
            if current is None:
                raise NotFound()
            raise Conflict(details={"current_version": current})
        fresh = reload() if reload else None
        if fresh is None:
            raise NotFound()
        memory = fresh
    raise Conflict(details={"current_version": current_version(memory.pk, memory.tenant_id)})


def change_guard(memory: Memory, cas: Cas) -> None:
    """A precondition checked against the row as read (the UPDATE checks it again)."""
    if (
        cas.create_only
        or (cas.version is not None and cas.version != memory.version)
        or (cas.updated_at is not None and cas.updated_at != memory.updated_at)
    ):
        raise Conflict(details={"current_version": memory.version})


def reload_any(memory: Memory) -> Memory | None:
    """The row as it is now, whatever its status (None when it is gone), with its owner and
    tenant (whose policies its expiry is computed from)."""
    return (
        Memory.objects.for_tenant(memory.tenant_id)
        .select_related("agent", "tenant")
        .filter(pk=memory.pk)
        .first()
    )


def reload_active(memory: Memory) -> Memory | None:
    """The row as it is now while it is active (None when it is gone or no longer active)."""
    return (
        Memory.objects.for_tenant(memory.tenant_id)
        .select_related("agent", "tenant")
        .filter(pk=memory.pk, status=Status.ACTIVE)
        .first()
    )


def kind_fields(
    memory: Memory, fields: dict[str, Any], registry: kind_registry.Registry | None
) -> dict[str, Any]:
    """A change of `kind` or `data` meets the (new) kind's rules: its schema checks the data
    the memory will hold (INVALID_INPUT with `details.errors`), its cardinality sets
    `kind_single` (the partial unique index then refuses a second single record)."""
    if "kind" not in fields and "data" not in fields:
        return fields
    registry = registry or kind_registry.registry(memory.tenant)
    rule = registry.rule(fields.get("kind", memory.kind))
    kind_registry.check_data(rule, fields.get("data", memory.data))
    return {**fields, "kind_single": rule.single}


def update_fields(
    memory: Memory, changes: dict[str, Any], registry: kind_registry.Registry | None = None
) -> dict[str, Any]:
    """Turn validated changes into column values (re-embedding when the content changed)."""
    fields = kind_fields(memory, dict(changes), registry)
    if "category" in fields:
        new, old = fields["category"], memory.category
        if (new == Category.WORKSPACE) != (old == Category.WORKSPACE):
            raise InvalidInput(
                "A memory cannot move in or out of the workspace; store it anew",
                field="category",
            )
        inputs.memory_fields_check(
            category=new,
            thread_id=memory.thread_id,
            scope=memory.scope,
            subject_id=memory.subject_id,
            category_changed=True,
        )
    if "text" in fields or "data" in fields:
        text = fields.pop("text", memory.text)
        data = fields.pop("data", memory.data)
        if not text.strip() and data is None:
            raise InvalidInput("'text' is required unless 'data' is given", field="text")
        fields.update(content_fields(text, data, previous=memory))
    return fields


def content_fields(
    text: str, data: dict[str, Any] | None, previous: Memory | None = None
) -> dict[str, Any]:
    """text/data and what derives from them (hash, size, embedding; re-embedded if needed)."""
    fields: dict[str, Any] = {
        "text": text,
        "data": data,
        "content_hash": fingerprints.content_hash(text, data),
        "size_bytes": fingerprints.size_bytes(text, data),
    }
    basis = fingerprints.embedding_text(text, data)
    if (
        previous is not None
        and fingerprints.embedding_text(previous.text, previous.data) == basis
        and previous.embedding_model == get_embedder().model_name
    ):
        return fields
    fields["embedding"], fields["embedding_model"] = embedding_for(basis)
    return fields


_write_embeddings: ContextVar[dict[str, tuple[list[float], str]] | None] = ContextVar(
    "write_embeddings", default=None
)


@contextmanager
def embeddings_remembered() -> Iterator[None]:
    """Within this block `content_fields` embeds each text once: a write that lost a race and
    is recomputed from the fresh row does not embed the same text twice. Nested blocks share
    the outermost one's memory (an extraction run seeds it for all its writes)."""
    if _write_embeddings.get() is not None:
        yield
        return
    token = _write_embeddings.set({})
    try:
        yield
    finally:
        _write_embeddings.reset(token)


def embeddings_seed(texts: list[str]) -> None:
    """Embed `texts` in one backend call and remember them for this `embeddings_remembered`
    block, so the writes after it never embed one by one (nor under a row lock)."""
    cache = _write_embeddings.get()
    if cache is None:
        raise RuntimeError("embeddings_seed needs an embeddings_remembered() block")
    todo = list(dict.fromkeys(t for t in texts if t not in cache))
    if todo:
        cache.update(zip(todo, embed_texts(todo), strict=True))


def embedding_for(basis: str) -> tuple[list[float], str]:
    """The embedding of `basis`: remembered in an `embeddings_remembered` block, else computed."""
    cache = _write_embeddings.get()
    if cache is None:
        return embed_text(basis)
    if basis not in cache:
        cache[basis] = embed_text(basis)
    return cache[basis]

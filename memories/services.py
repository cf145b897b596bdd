"""Every write to a memory: store/upsert, compare-and-set, dedup, eviction, forget and purge,
and the operator actions of the console. REST views, MCP tools, console views and jobs all call
these functions, so each rule lives here once.

Conventions:
- Each change is one conditional `UPDATE … WHERE id = … AND version = n` (compare-and-set) plus
  exactly one `MemoryRevision` in the same transaction. 0 rows updated means someone else won:
  with an explicit precondition that is `409 CONFLICT`; without one the write re-reads and
  retries.
- Embeddings are computed before any transaction or lock is taken; a failure raises
  `EMBEDDING_ERROR` with nothing written.
- Every change bumps `version` and sets `updated_at`, so `expected_updated_at` is as strong a
  precondition as `expected_version`.
- Evictions at the entry cap are recorded with the actor `system:cap`, whoever triggered them:
  the agent asked to store a fact, the policy chose what to drop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Case, IntegerField, Q, Value, When

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memories import idempotency, validation
from memories.clock import resolve_now
from memories.dedup import Probe, near_duplicates
from memories.embeddings import get_embedder
from memories.ids import is_memory_id
from memories.models import (
    EMBEDDING_DIM,
    Category,
    ChangeType,
    Memory,
    OwnerCount,
    ReviewState,
    Status,
)
from memories.revisions import revision_write, snapshot
from memories.serialization import iso, memory_json
from memories.visibility import visible_memories, visible_q
from memoryhub.errors import (
    Conflict,
    DomainError,
    EmbeddingError,
    InvalidInput,
    NotFound,
    QuotaExceeded,
    ScopeDenied,
    SecretRejected,
)

logger = logging.getLogger(__name__)

# Optimistic retries of an unconditioned write that lost a race: every round has a winner, so
# n concurrent writers of one row need at most n rounds; this only bounds a runaway.
MAX_RETRIES = 100
CAP_ACTOR = "system:cap"
MAX_REASON_CHARS = 1000
# What a purge erases from the memory row and from every before/after of its revisions.
PURGED_FIELDS = {"text": "", "data": None, "key": None, "tags": [], "mentions": []}


# --- shared helpers --------------------------------------------------------------------------


def scan_secrets(*, text: Any = None, data: Any = None, tags: Any = None, key: Any = None) -> None:
    """Raise SECRET_REJECTED (rule and field only, never the value) for a secret-shaped input."""
    from memories.secrets_scan import find_secret

    for value, name in ((text, "text"), (data, "data"), (tags, "tags"), (key, "key")):
        if value in (None, "", [], {}):
            continue
        finding = find_secret(value, name)
        if finding is not None:
            raise SecretRejected(details={"rule": finding.rule, "field": finding.field})


def embed_text(value: str) -> tuple[list[float], str]:
    """One embedding and the model name; any backend failure becomes EMBEDDING_ERROR."""
    try:
        embedder = get_embedder()
        vector = list(embedder.embed([value])[0])
    except EmbeddingError:
        raise
    except Exception as exc:  # noqa: BLE001 - a backend may fail in any way; never half-write
        logger.warning("embedding backend failed: %s", type(exc).__name__)
        raise EmbeddingError() from exc
    if len(vector) != EMBEDDING_DIM:
        raise EmbeddingError(details={"reason": "wrong dimension"})
    return vector, embedder.model_name


def cap_lock(tenant: Tenant, agent: Agent | None) -> None:
    """The owner's cap lock (transaction-level; the prune job's cap sweep takes the same one).

    Take it before changing any of the owner's memories in a transaction that will check the
    cap: the change locks the owner's counter row (memories_ownercount), and the sweep takes the
    cap lock first and the counter row second, so the other order could deadlock.
    """
    _advisory_lock(f"cap:{tenant.pk}:{agent.pk if agent else 'workspace'}")


def _advisory_lock(name: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def _owned_q(agent: Agent, subject_id: str | None) -> Q:
    """Memories this agent may change: its own and the workspace's, within the subject."""
    owners = Q(agent_id=agent.pk) | Q(agent__isnull=True, category=Category.WORKSPACE)
    subjects = Q(subject_id__isnull=True)
    if subject_id:
        subjects |= Q(subject_id=subject_id)
    return owners & subjects


def _conditional_update(
    memory: Memory,
    *,
    fields: dict[str, Any],
    now: datetime,
    expected_version: int,
    expected_updated_at: datetime | None = None,
) -> bool:
    """The compare-and-set: one UPDATE guarded by the version; applies the values on success."""
    rows = Memory.objects.filter(pk=memory.pk, tenant_id=memory.tenant_id, version=expected_version)
    if expected_updated_at is not None:
        rows = rows.filter(updated_at=expected_updated_at)
    values = {**fields, "version": expected_version + 1, "updated_at": now}
    if rows.update(**values) != 1:
        return False
    for name, value in values.items():
        setattr(memory, name, value)
    return True


def _current_version(memory_id: str, tenant_id: int) -> int | None:
    return (
        Memory.objects.filter(pk=memory_id, tenant_id=tenant_id)
        .values_list("version", flat=True)
        .first()
    )


def _change(
    memory: Memory,
    *,
    fields: dict[str, Any] | Callable[[Memory], dict[str, Any]],
    actor: str,
    change_type: str,
    now: datetime,
    reason: str = "",
    cas: validation.Cas | None = None,
    reload: Callable[[], Memory | None] | None = None,
) -> Memory:
    """Apply `fields` with compare-and-set and write the one revision of this change.

    `fields` may be a function of the current row (computed before the UPDATE, never under a
    lock). With `cas` a lost race is a CONFLICT; without it the write re-reads (`reload()`
    returns the fresh row, or None when it is gone → NOT_FOUND) and tries again.
    """
    for _ in range(MAX_RETRIES):
        if cas is not None:
            _change_guard(memory, cas)
        values = fields(memory) if callable(fields) else fields
        before = snapshot(memory)
        with transaction.atomic():
            if _conditional_update(
                memory,
                fields=values,
                now=now,
                expected_version=memory.version,
                expected_updated_at=cas.updated_at if cas else None,
            ):
                revision_write(
                    memory=memory,
                    actor=actor,
                    change_type=change_type,
                    reason=reason,
                    before=before,
                    after=snapshot(memory),
                    now=now,
                )
                return memory
        if cas is not None:
            current = _current_version(memory.pk, memory.tenant_id)
            if current is None:
                raise NotFound()
            raise Conflict(details={"current_version": current})
        fresh = reload() if reload else None
        if fresh is None:
            raise NotFound()
        memory = fresh
    raise Conflict(details={"current_version": _current_version(memory.pk, memory.tenant_id)})


def _change_guard(memory: Memory, cas: validation.Cas) -> None:
    """A precondition checked against the row as read (the UPDATE checks it again)."""
    if (
        cas.create_only
        or (cas.version is not None and cas.version != memory.version)
        or (cas.updated_at is not None and cas.updated_at != memory.updated_at)
    ):
        raise Conflict(details={"current_version": memory.version})


def _content_fields(text: str, data: dict | None, previous: Memory | None = None) -> dict:
    """text/data and what derives from them (hash, size, embedding; re-embedded if needed)."""
    fields: dict[str, Any] = {
        "text": text,
        "data": data,
        "content_hash": validation.content_hash(text, data),
        "size_bytes": validation.size_bytes(text, data),
    }
    basis = validation.embedding_text(text, data)
    if (
        previous is not None
        and previous.embedding is not None
        and validation.embedding_text(previous.text, previous.data) == basis
        and previous.embedding_model == get_embedder().model_name
    ):
        return fields
    fields["embedding"], fields["embedding_model"] = _embed_cached(basis)
    return fields


def _embed_cached(basis: str) -> tuple[list[float], str]:
    """`embed_text`, remembered for the current write only: a write that lost a race and is
    recomputed from the fresh row does not embed the same text twice."""
    cache = _write_embeddings.get()
    if cache is None:
        return embed_text(basis)
    if basis not in cache:
        cache[basis] = embed_text(basis)
    return cache[basis]


_write_embeddings: ContextVar[dict | None] = ContextVar("write_embeddings", default=None)


def _reason(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"'reason' must be a string of at most {MAX_REASON_CHARS} characters", field="reason"
        )
    validation.reject_nul(value, "reason")
    return value.strip()


# --- store -----------------------------------------------------------------------------------


@dataclass
class StoreResult:
    """What a store did; `.as_response()` is the SPEC §4 body, `.status_code` its status."""

    memory: Memory | None
    created: bool
    message: str
    near_duplicates: list[dict[str, Any]] = field(default_factory=list)
    previously_corrected: list[dict[str, Any]] = field(default_factory=list)
    agent: Agent | None = None
    replayed: bool = False
    _body: dict[str, Any] | None = None
    _status: int | None = None

    @property
    def status_code(self) -> int:
        if self._status is not None:
            return self._status
        return 201 if self.created else 200

    def as_response(self) -> dict[str, Any]:
        if self._body is not None:
            return self._body
        assert self.memory is not None
        body: dict[str, Any] = {
            "ok": True,
            "memory_id": self.memory.id,
            "message": self.message,
            "version": self.memory.version,
            "memory": memory_json(self.memory, agent=self.agent),
        }
        if self.near_duplicates:
            body["near_duplicates"] = self.near_duplicates
        if self.previously_corrected:
            body["previously_corrected"] = self.previously_corrected
        return body


@dataclass
class _Prepared:
    inp: validation.StoreInput
    subject_id: str | None
    owner: Agent | None
    embedding: list[float]
    embedding_model: str
    content_hash: str
    size_bytes: int


def memory_store(
    *,
    principal: Principal,
    data: dict,
    idempotency_key: str | None = None,
    now: datetime | None = None,
) -> StoreResult:
    """Store a memory (SPEC §4 Store): keyed upsert with compare-and-set, or an insert under a
    dedup policy; reports near duplicates and previously corrected (tombstoned) look-alikes,
    evicts at the entry cap. With `idempotency_key` the first response is stored (per tenant,
    24 h) and replayed; the same key with another body raises IDEMPOTENCY_MISMATCH.
    """
    principal.require_scope("write")
    now = resolve_now(now)
    key = idempotency.clean_key(idempotency_key)
    request_hash = ""
    if key is not None:
        request_hash = idempotency.fingerprint(principal=principal, operation="store", payload=data)
        early = idempotency.peek(
            tenant=principal.tenant, key=key, request_hash=request_hash, now=now
        )
        if early is not None:
            return _replayed(principal, early)

    prepared = _prepare_store(principal=principal, data=data, now=now)
    if key is None:
        with transaction.atomic():
            return _store_write(principal=principal, prepared=prepared, now=now)

    holder: dict[str, StoreResult] = {}

    def action() -> tuple[int, dict]:
        result = _store_write(principal=principal, prepared=prepared, now=now)
        holder["result"] = result
        return result.status_code, result.as_response()

    outcome = idempotency.run_idempotent(
        tenant=principal.tenant, key=key, request_hash=request_hash, now=now, action=action
    )
    return holder["result"] if not outcome.replayed else _replayed(principal, outcome)


def _replayed(principal: Principal, outcome: idempotency.Outcome) -> StoreResult:
    """The stored response, byte for byte; `.memory` is the row as it is now (or None)."""
    memory = (
        Memory.objects.for_tenant(principal.tenant)
        .select_related("agent")
        .filter(pk=outcome.body.get("memory_id"))
        .first()
    )
    return StoreResult(
        memory=memory,
        created=outcome.status == 201,
        message=outcome.body.get("message", ""),
        near_duplicates=outcome.body.get("near_duplicates", []),
        previously_corrected=outcome.body.get("previously_corrected", []),
        agent=principal.agent,
        replayed=True,
        _body=outcome.body,
        _status=outcome.status,
    )


def _prepare_store(*, principal: Principal, data: Any, now: datetime) -> _Prepared:
    """Everything that needs no database: validation, secret scan and the embedding."""
    inp = validation.parse_store(data, agent=principal.agent, now=now)
    scan_secrets(text=data.get("text"), data=data.get("data"), tags=data.get("tags"), key=inp.key)
    subject_id = principal.resolve_subject(inp.subject_id)
    vector, model = embed_text(validation.embedding_text(inp.text, inp.data))
    return _Prepared(
        inp=inp,
        subject_id=subject_id,
        owner=None if inp.is_workspace else principal.agent,
        embedding=vector,
        embedding_model=model,
        content_hash=validation.content_hash(inp.text, inp.data),
        size_bytes=validation.size_bytes(inp.text, inp.data),
    )


def _store_write(*, principal: Principal, prepared: _Prepared, now: datetime) -> StoreResult:
    """The transactional half of a store (the caller holds the transaction)."""
    inp = prepared.inp
    corrected = _previously_corrected(principal=principal, prepared=prepared)
    if inp.key:
        return _upsert(principal=principal, prepared=prepared, corrected=corrected, now=now)

    near: list[dict[str, Any]] = []
    if inp.dedup_policy != "insert":
        near_rows = _near_duplicates(principal=principal, prepared=prepared, now=now)
        near = [{"memory_id": m.id, "text": m.text, "similarity": sim} for m, sim in near_rows]
        if near_rows and inp.dedup_policy == "skip_if_near":
            return StoreResult(
                memory=near_rows[0][0],
                created=False,
                message="Already remembered",
                near_duplicates=near,
                previously_corrected=corrected,
                agent=principal.agent,
            )
    memory = _insert(principal=principal, prepared=prepared, pending=bool(near), now=now)
    return StoreResult(
        memory=memory,
        created=True,
        message="Ok",
        near_duplicates=near,
        previously_corrected=corrected,
        agent=principal.agent,
    )


def _store_fields(prepared: _Prepared, now: datetime) -> dict[str, Any]:
    inp = prepared.inp
    return {
        "category": inp.category,
        "kind": inp.kind,
        "text": inp.text,
        "data": inp.data,
        "tags": inp.tags,
        "thread_id": inp.thread_id,
        "importance": inp.importance,
        "confidence": inp.confidence,
        "capture_mode": inp.capture_mode,
        "source_provider": inp.source_provider,
        "mentions": inp.mentions,
        "expires_at": inp.expires_at,
        "last_confirmed_at": inp.last_confirmed_at,
        "size_bytes": prepared.size_bytes,
        "content_hash": prepared.content_hash,
        "embedding": prepared.embedding,
        "embedding_model": prepared.embedding_model,
    }


def _check_quota(tenant: Tenant, owner: Agent | None) -> None:
    cap = owner.entry_cap if owner is not None else tenant.workspace_cap
    if cap <= 0:
        raise QuotaExceeded(
            "The entry cap is 0: nothing can be stored",
            details={"entry_cap" if owner else "workspace_cap": cap},
        )


def _insert(*, principal: Principal, prepared: _Prepared, pending: bool, now: datetime) -> Memory:
    inp = prepared.inp
    _check_quota(principal.tenant, prepared.owner)
    cap_lock(principal.tenant, prepared.owner)  # before the insert touches the counter row
    review = ReviewState.PENDING if pending or inp.capture_mode == "inferred" else ReviewState.NONE
    memory = Memory(
        tenant=principal.tenant,
        agent=prepared.owner,
        created_by=principal.actor,
        key=inp.key,
        subject_id=prepared.subject_id,
        created_at=now,
        updated_at=now,
        last_accessed_at=now,
        review_state=review,
        **_store_fields(prepared, now),
    )
    memory.save(force_insert=True)
    revision_write(
        memory=memory,
        actor=principal.actor,
        change_type=ChangeType.CREATE,
        after=snapshot(memory),
        now=now,
    )
    _evict_over_cap(tenant=principal.tenant, agent=prepared.owner, now=now, exclude_ids=[memory.pk])
    return memory


def _keyed(tenant: Tenant, owner: Agent | None, subject_id: str | None, key: str) -> Memory | None:
    """The active row holding a key (it may be past `expires_at`: the unique slot is taken)."""
    return (
        Memory.objects.for_tenant(tenant)
        .select_related("agent")
        .filter(
            agent=owner,
            subject_id=subject_id,
            key=key,
            status=Status.ACTIVE,
        )
        .first()
    )


def _upsert(
    *, principal: Principal, prepared: _Prepared, corrected: list[dict], now: datetime
) -> StoreResult:
    inp = prepared.inp
    cas = inp.cas
    tenant = principal.tenant
    for _ in range(MAX_RETRIES):
        existing = _keyed(tenant, prepared.owner, prepared.subject_id, inp.key)
        if existing is not None and existing.expires_at and existing.expires_at <= now:
            # Invisible already; expire it so the key is free for the new fact.
            cap_lock(tenant, prepared.owner)
            _expire(existing, actor=principal.actor, reason="expired", now=now)
            existing = None
        if existing is None:
            if cas is not None and not cas.create_only:
                raise Conflict(details={"current_version": 0})
            try:
                with transaction.atomic():
                    memory = _insert(principal=principal, prepared=prepared, pending=False, now=now)
            except IntegrityError as exc:
                if "memory_live_key_uniq" not in str(exc):
                    raise
                if cas is not None:
                    current = _keyed(tenant, prepared.owner, prepared.subject_id, inp.key)
                    raise Conflict(
                        details={"current_version": current.version if current else 0}
                    ) from None
                continue  # a concurrent store took the key: update it instead
            return StoreResult(
                memory=memory,
                created=True,
                message="Ok",
                previously_corrected=corrected,
                agent=principal.agent,
            )
        fields = _store_fields(prepared, now)
        if inp.capture_mode == "inferred":
            fields["review_state"] = ReviewState.PENDING
        try:
            memory = _change(
                existing,
                fields=fields,
                actor=principal.actor,
                change_type=ChangeType.UPDATE,
                now=now,
                cas=cas,
                reload=None,
            )
        except NotFound:
            continue  # it was forgotten meanwhile: the key is free again
        except Conflict:
            if cas is not None:
                raise
            continue
        return StoreResult(
            memory=memory,
            created=False,
            message="Updated",
            previously_corrected=corrected,
            agent=principal.agent,
        )
    raise Conflict(details={"current_version": None})


def _probe(prepared: _Prepared) -> Probe:
    return Probe(
        content_hash=prepared.content_hash,
        embedding=prepared.embedding,
        embedding_model=prepared.embedding_model,
    )


def _near_duplicates(
    *, principal: Principal, prepared: _Prepared, now: datetime
) -> list[tuple[Memory, float]]:
    rows = visible_memories(
        tenant=principal.tenant, agent=principal.agent, subject_id=prepared.subject_id, now=now
    )
    return near_duplicates(rows, [_probe(prepared)], threshold=principal.agent.dedup_threshold)[0]


def _previously_corrected(*, principal: Principal, prepared: _Prepared) -> list[dict[str, Any]]:
    rows = (
        Memory.objects.for_tenant(principal.tenant)
        .filter(status=Status.TOMBSTONED, purged_at__isnull=True)
        .filter(visible_q(agent=principal.agent, subject_id=prepared.subject_id))
    )
    similar = near_duplicates(rows, [_probe(prepared)], threshold=principal.agent.dedup_threshold)
    return [
        {
            "memory_id": m.id,
            "text": m.text,
            "reason": m.tombstone_reason,
            "tombstoned_at": iso(m.tombstoned_at),
            "similarity": sim,
        }
        for m, sim in similar[0]
    ]


# --- eviction and expiry ---------------------------------------------------------------------


def memory_evict_over_cap(
    *,
    tenant: Tenant,
    agent: Agent | None = None,
    actor: str = CAP_ACTOR,
    now: datetime | None = None,
) -> int:
    """Evict the coldest live memories while the owner is over its cap; returns how many.

    `agent` None means the tenant's workspace memories against `tenant.workspace_cap`.
    Coldest = oldest `last_accessed_at`, then oldest `updated_at`; non-core memories go first,
    a `core` one only when no non-core is left.
    """
    with transaction.atomic():
        return _evict_over_cap(tenant=tenant, agent=agent, actor=actor, now=resolve_now(now))


def _evict_over_cap(
    *,
    tenant: Tenant,
    agent: Agent | None,
    now: datetime,
    actor: str = CAP_ACTOR,
    exclude_ids: list[str] | tuple[str, ...] = (),
) -> int:
    # One owner's cap is enforced by one transaction at a time, so two concurrent stores cannot
    # both see room for themselves. (Re-taking a lock this transaction holds is a no-op.)
    cap_lock(tenant, agent)
    live = Memory.objects.for_tenant(tenant).live(now)
    if agent is not None:
        live, cap = live.filter(agent=agent), agent.entry_cap
    else:
        live, cap = (
            live.filter(agent__isnull=True, category=Category.WORKSPACE),
            tenant.workspace_cap,
        )
    # The trigger-kept active count bounds the live count (live ≤ active): the common answer,
    # "not over", costs one row read. Only an owner that may be over its cap is counted.
    active = (
        OwnerCount.objects.filter(tenant_id=tenant.pk, owner_id=agent.pk if agent else 0)
        .values_list("active", flat=True)
        .first()
    )
    if active is not None and active <= cap:
        return 0
    excess = live.count() - cap
    if excess <= 0:
        return 0
    victims = list(
        live.exclude(pk__in=list(exclude_ids))
        .annotate(
            is_core=Case(
                When(category=Category.CORE, then=Value(1)),
                default=Value(0),
                output_field=IntegerField(),
            )
        )
        .order_by("is_core", "last_accessed_at", "updated_at", "id")
        .select_for_update(skip_locked=True, of=("self",))[:excess]
    )
    for memory in victims:
        before = snapshot(memory)
        _conditional_update(
            memory,
            fields={"status": Status.EVICTED, "status_changed_at": now},
            now=now,
            expected_version=memory.version,
        )
        revision_write(
            memory=memory,
            actor=actor,
            change_type=ChangeType.EVICT,
            reason=f"{'entry' if agent else 'workspace'} cap of {cap} reached",
            before=before,
            after=snapshot(memory),
            now=now,
        )
    return len(victims)


def _expire(memory: Memory, *, actor: str, reason: str, now: datetime) -> Memory:
    return _change(
        memory,
        fields={"status": Status.EXPIRED, "status_changed_at": now},
        actor=actor,
        change_type=ChangeType.EXPIRE,
        reason=reason,
        now=now,
        reload=lambda: _reload_active(memory),
    )


def _reload_active(memory: Memory) -> Memory | None:
    return (
        Memory.objects.select_related("agent")
        .filter(pk=memory.pk, tenant_id=memory.tenant_id, status=Status.ACTIVE)
        .first()
    )


# --- agent changes ---------------------------------------------------------------------------


def _writable(
    *, principal: Principal, memory_id: str, subject_id: str | None, now: datetime
) -> Memory:
    """A live memory the key may change: 404 when it cannot see it, 403 when it is shared."""
    if not is_memory_id(memory_id):
        raise NotFound()
    memory = (
        visible_memories(
            tenant=principal.tenant, agent=principal.agent, subject_id=subject_id, now=now
        )
        .select_related("agent")
        .filter(pk=memory_id)
        .first()
    )
    if memory is None:
        raise NotFound()
    if memory.agent_id not in (None, principal.agent.pk):
        raise ScopeDenied(
            "Memories shared by another agent are read-only", details={"memory_id": memory_id}
        )
    return memory


def _update_fields(memory: Memory, changes: dict[str, Any]) -> dict[str, Any]:
    """Turn validated changes into column values (re-embedding when the content changed)."""
    fields = dict(changes)
    if "category" in fields:
        new, old = fields["category"], memory.category
        if (new == Category.WORKSPACE) != (old == Category.WORKSPACE):
            raise InvalidInput(
                "A memory cannot move in or out of the workspace; store it anew",
                field="category",
            )
        if new == Category.CONVERSATION and not memory.thread_id:
            raise InvalidInput("A conversation memory needs a 'thread_id'", field="category")
    if "text" in fields or "data" in fields:
        text = fields.pop("text", memory.text)
        data = fields.pop("data", memory.data)
        if not text.strip() and data is None:
            raise InvalidInput("'text' is required unless 'data' is given", field="text")
        fields.update(_content_fields(text, data, previous=memory))
    return fields


def memory_update(
    *,
    principal: Principal,
    memory_id: str,
    data: dict,
    if_match: str | None = None,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> Memory:
    """PATCH a memory (SPEC §4 Change): only the given fields; CAS via `expected_version`,
    `expected_updated_at` or `If-Match`. Shared memories are read-only (403)."""
    principal.require_scope("write")
    now = resolve_now(now)
    inp = validation.parse_update(data, now=now, if_match=if_match)
    scan_secrets(text=data.get("text"), data=data.get("data"), tags=data.get("tags"))
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    memory = _writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
    if not inp.changes:
        if inp.cas is not None:
            _change_guard(memory, inp.cas)
        return memory

    def reload() -> Memory | None:
        return (
            visible_memories(
                tenant=principal.tenant, agent=principal.agent, subject_id=subject, now=now
            )
            .select_related("agent")
            .filter(pk=memory_id)
            .first()
        )

    token = _write_embeddings.set({})
    try:
        return _change(
            memory,
            fields=lambda current: _update_fields(current, inp.changes),
            actor=principal.actor,
            change_type=ChangeType.UPDATE,
            now=now,
            cas=inp.cas,
            reload=reload,
        )
    finally:
        _write_embeddings.reset(token)


def memory_confirm(
    *,
    principal: Principal,
    memory_id: str,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> Memory:
    """The agent re-confirms a fact: `last_confirmed_at` = now (a change: version + 1)."""
    principal.require_scope("write")
    now = resolve_now(now)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    memory = _writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
    return _change(
        memory,
        fields={"last_confirmed_at": now},
        actor=principal.actor,
        change_type=ChangeType.CONFIRM,
        now=now,
        reload=lambda: _reload_active(memory),
    )


def memory_forget(
    *,
    principal: Principal,
    memory_id: str | None = None,
    key: str | None = None,
    subject_id: str | None = None,
    reason: str = "",
    purge: bool = False,
    now: datetime | None = None,
) -> tuple[bool, str | None]:
    """Forget by id or key: tombstone (kept for `previously_corrected`), or with `purge`
    (admin scope) erase text, data and embedding from the memory and its revisions.

    Returns (deleted, memory_id): by id, an unknown or invisible id is 404 and one already
    forgotten answers (False, id); by key, no such key answers (False, None).
    """
    principal.require_scope("admin" if purge else "write")
    now = resolve_now(now)
    reason = _reason(reason)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    owned = Memory.objects.for_tenant(principal.tenant).filter(_owned_q(principal.agent, subject))
    if memory_id is not None:
        memory = owned.filter(pk=memory_id).first() if is_memory_id(memory_id) else None
        if memory is None:
            _writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
            raise NotFound()  # defensive: _writable raised already
        targets = [memory]
    else:
        key = validation.identifier(key, "key")
        if key is None:
            raise InvalidInput("'key' is required", field="key")
        rows = owned.filter(key=key).order_by(
            Case(When(agent_id=principal.agent.pk, then=Value(0)), default=Value(1)),
            Case(When(subject_id__isnull=False, then=Value(0)), default=Value(1)),
            "-updated_at",
        )
        live = list(rows.live(now)[:1])
        # A purge by key erases every version that ever held the key, not only the live one.
        targets = (
            live + list(rows.filter(purged_at__isnull=True).exclude(pk__in=[m.pk for m in live]))
            if purge
            else live
        )
        if not targets:
            return False, None
        memory = targets[0]

    deleted = False
    with transaction.atomic():
        for target in targets:
            if purge:
                if target.purged_at is None:
                    _purge(target, actor=principal.actor, reason=reason, now=now)
                    deleted = True
            elif _is_live(target, now):
                _tombstone(target, actor=principal.actor, reason=reason, now=now)
                deleted = True
    return deleted, memory.pk


def _is_live(memory: Memory, now: datetime) -> bool:
    return memory.status == Status.ACTIVE and (memory.expires_at is None or memory.expires_at > now)


def thread_end(*, principal: Principal, thread_id: str, now: datetime | None = None) -> int:
    """End a run: its `conversation` memories are marked expired (one revision each).

    A key bound to a subject ends only that subject's (and subject-less) memories of the thread.
    """
    principal.require_scope("write")
    now = resolve_now(now)
    thread_id = validation.identifier(thread_id, "thread_id")
    if thread_id is None:
        raise InvalidInput("'thread_id' is required", field="thread_id")
    rows = (
        Memory.objects.for_tenant(principal.tenant)
        .filter(agent=principal.agent, category=Category.CONVERSATION, thread_id=thread_id)
        .filter(status=Status.ACTIVE)
    )
    if principal.bound_subject is not None:
        rows = rows.filter(Q(subject_id__isnull=True) | Q(subject_id=principal.bound_subject))
    removed = 0
    with transaction.atomic():
        for memory in rows.order_by("id").select_for_update():
            before = snapshot(memory)
            if _conditional_update(
                memory,
                fields={"status": Status.EXPIRED, "status_changed_at": now},
                now=now,
                expected_version=memory.version,
            ):
                revision_write(
                    memory=memory,
                    actor=principal.actor,
                    change_type=ChangeType.EXPIRE,
                    reason="thread ended",
                    before=before,
                    after=snapshot(memory),
                    now=now,
                )
                removed += 1
    return removed


# --- tombstone / purge / restore (agents and operators) --------------------------------------


def _tombstone(
    memory: Memory,
    *,
    actor: str,
    reason: str,
    now: datetime,
    change_type: str = ChangeType.TOMBSTONE,
) -> Memory:
    return _change(
        memory,
        fields={
            "status": Status.TOMBSTONED,
            "status_changed_at": now,
            "tombstone_reason": reason,
            "tombstoned_by": actor,
            "tombstoned_at": now,
        },
        actor=actor,
        change_type=change_type,
        reason=reason,
        now=now,
        reload=lambda: _reload_any(memory),
    )


def _reload_any(memory: Memory) -> Memory | None:
    return (
        Memory.objects.select_related("agent")
        .filter(pk=memory.pk, tenant_id=memory.tenant_id)
        .first()
    )


def _purge(memory: Memory, *, actor: str, reason: str, now: datetime) -> Memory:
    """Erase the content for good: the row keeps ids, hashes and timestamps only."""
    fields: dict[str, Any] = {
        **PURGED_FIELDS,
        "embedding": None,
        "embedding_model": "",
        "purged_at": now,
    }
    if memory.status == Status.ACTIVE:
        fields.update(
            status=Status.TOMBSTONED,
            status_changed_at=now,
            tombstone_reason=reason or "purged",
            tombstoned_by=actor,
            tombstoned_at=now,
        )
    with transaction.atomic():
        for _ in range(MAX_RETRIES):
            if _conditional_update(memory, fields=fields, now=now, expected_version=memory.version):
                break
            memory = _reload_any(memory)
            if memory is None:
                raise NotFound()
        else:
            raise Conflict(details={"current_version": memory.version})
        _erase_revisions(memory)
        idempotency.forget_records_mentioning(tenant=memory.tenant, memory_id=memory.pk)
        revision_write(
            memory=memory,
            actor=actor,
            change_type=ChangeType.PURGE,
            reason=reason,
            after=snapshot(memory),
            now=now,
        )
    return memory


def _erase_revisions(memory: Memory) -> None:
    import json

    patch = json.dumps(PURGED_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE memories_memoryrevision SET
              before = CASE WHEN jsonb_typeof(before) = 'object'
                            THEN before || %s::jsonb ELSE before END,
              after = CASE WHEN jsonb_typeof(after) = 'object'
                           THEN after || %s::jsonb ELSE after END
            WHERE tenant_id = %s AND memory_id = %s
            """,
            [patch, patch, memory.tenant_id, memory.pk],
        )


# --- operator actions (console) --------------------------------------------------------------


def _operator_get(tenant: Tenant, memory_id: str) -> Memory:
    memory = (
        Memory.objects.for_tenant(tenant).select_related("agent").filter(pk=memory_id).first()
        if is_memory_id(memory_id)
        else None
    )
    if memory is None:
        raise NotFound()
    return memory


def _not_purged(memory: Memory) -> None:
    if memory.purged_at is not None:
        raise InvalidInput("This memory was purged; its content is gone", field="memory_id")


CORRECTABLE_FIELDS = validation.UPDATE_FIELDS | {"key"}


def memory_correct(
    *,
    tenant: Tenant,
    memory_id: str,
    actor: str,
    changes: dict,
    expected_version: int,
    now: datetime | None = None,
) -> Memory:
    """An operator's correction (console `Edit` → `Save`): the same validation as a PATCH,
    compare-and-set against the version the form was loaded with (CONFLICT with
    `details.current_version` when it moved on), one `correct` revision. Only an active memory
    is corrected: a tombstoned (or purged), evicted or expired one is a CONFLICT
    (`details.status`) until it is restored, so an edit begun before a tombstone never rewrites
    the tombstone."""
    now = resolve_now(now)
    changes = {
        k: v for k, v in changes.items() if k not in ("expected_version", "expected_updated_at")
    }
    inp = validation.parse_update(changes, now=now, allowed=CORRECTABLE_FIELDS)
    scan_secrets(
        text=changes.get("text"),
        data=changes.get("data"),
        tags=changes.get("tags"),
        key=inp.changes.get("key"),
    )
    memory = _operator_get(tenant, memory_id)
    _correctable(memory)  # first: a purged memory is tombstoned too, a CONFLICT like any other
    _not_purged(memory)
    cas = validation.Cas(version=expected_version)
    if not inp.changes:
        _change_guard(memory, cas)
        return memory
    try:
        return _change(
            memory,
            fields=lambda current: _update_fields(current, inp.changes),
            actor=actor,
            change_type=ChangeType.CORRECT,
            now=now,
            cas=cas,
        )
    except IntegrityError as exc:
        if "memory_live_key_uniq" in str(exc):
            raise Conflict("Another live memory holds this key", details={"field": "key"}) from None
        raise


def _correctable(memory: Memory) -> None:
    # The row as read; a tombstone after this read bumps the version, so the CAS catches it.
    if memory.status != Status.ACTIVE:
        by = f" by {memory.tombstoned_by}" if memory.tombstoned_by else ""
        raise Conflict(
            f"This memory was {memory.status}{by}; restore it before correcting it",
            details={"current_version": memory.version, "status": memory.status},
        )


def memory_tombstone(
    *, tenant: Tenant, memory_id: str, actor: str, reason: str = "", now: datetime | None = None
) -> Memory:
    """An operator forgets a memory (kept as a tombstone; no-op when already tombstoned)."""
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    if memory.status == Status.TOMBSTONED:
        return memory
    return _tombstone(memory, actor=actor, reason=_reason(reason), now=now)


def memory_restore(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Bring a tombstoned, evicted or expired memory back to `active` (not a purged one).

    An expiry already past is cleared; a live memory holding the same key is a CONFLICT; the
    owner's cap is enforced afterwards (never evicting the restored memory itself).
    """
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    _not_purged(memory)
    if memory.status == Status.ACTIVE:
        return memory
    fields: dict[str, Any] = {
        "status": Status.ACTIVE,
        "status_changed_at": now,
        "tombstone_reason": "",
        "tombstoned_by": "",
        "tombstoned_at": None,
    }
    if memory.expires_at is not None and memory.expires_at <= now:
        fields["expires_at"] = None
    try:
        with transaction.atomic():
            cap_lock(tenant, memory.agent)
            memory = _change(
                memory,
                fields=fields,
                actor=actor,
                change_type=ChangeType.RESTORE,
                now=now,
                cas=validation.Cas(version=memory.version),
            )
            _evict_over_cap(tenant=tenant, agent=memory.agent, now=now, exclude_ids=[memory.pk])
    except IntegrityError as exc:
        if "memory_live_key_uniq" in str(exc):
            raise Conflict("Another live memory holds this key", details={"field": "key"}) from None
        raise
    return memory


def memory_purge(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Right to erasure: remove text, data and embedding from the memory and its revisions."""
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    if memory.purged_at is not None:
        return memory
    return _purge(memory, actor=actor, reason="purged", now=now)


def memory_approve(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Review queue `Approve`: `review_state=approved` and `last_confirmed_at` = now."""
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    _not_purged(memory)
    return _change(
        memory,
        fields={"review_state": ReviewState.APPROVED, "last_confirmed_at": now},
        actor=actor,
        change_type=ChangeType.APPROVE,
        now=now,
        reload=lambda: _reload_any(memory),
    )


def memory_merge(
    *,
    tenant: Tenant,
    keep_id: str,
    merge_ids: list[str],
    actor: str,
    now: datetime | None = None,
) -> Memory:
    """Keep one memory, tombstone the others with reason "merged into <keep_id>".

    Merging is a review decision: the kept memory is approved too (`review_state=approved`,
    `last_confirmed_at` = now, an `approve` revision), so it leaves the review queue.
    """
    now = resolve_now(now)
    keep = _operator_get(tenant, keep_id)
    if keep.status != Status.ACTIVE:
        raise InvalidInput("The memory to keep must be active", field="keep_id")
    others = [i for i in dict.fromkeys(merge_ids) if i != keep_id]
    memories = [_operator_get(tenant, i) for i in others]
    with transaction.atomic():
        keep = memory_approve(tenant=tenant, memory_id=keep_id, actor=actor, now=now)
        for memory in memories:
            if memory.status == Status.ACTIVE:
                _tombstone(
                    memory,
                    actor=actor,
                    reason=f"merged into {keep_id}",
                    now=now,
                    change_type=ChangeType.MERGE,
                )
    return keep


def memory_add_tag(
    *, tenant: Tenant, memory_ids: list[str], tag: str, actor: str, now: datetime | None = None
) -> int:
    """Bulk `Add tag`: returns how many memories gained the tag (one revision each)."""
    now = resolve_now(now)
    tag = validation.normalise_tag(tag)
    scan_secrets(tags=[tag])
    ids = [i for i in dict.fromkeys(memory_ids) if is_memory_id(i)]
    changed = 0
    with transaction.atomic():
        rows = (
            Memory.objects.for_tenant(tenant)
            .select_related("agent")
            .filter(pk__in=ids, purged_at__isnull=True)
            .order_by("id")
        )
        for memory in rows:
            if tag in memory.tags:
                continue
            if len(memory.tags) >= validation.MAX_TAGS:
                raise InvalidInput(
                    f"{memory.id} has {validation.MAX_TAGS} tags already", field="tag"
                )
            _change(
                memory,
                fields=lambda current: {"tags": list(dict.fromkeys([*current.tags, tag]))},
                actor=actor,
                change_type=ChangeType.UPDATE,
                reason=f"tag {tag} added",
                now=now,
                reload=partial(_reload_any, memory),
            )
            changed += 1
    return changed


__all__ = [
    "CAP_ACTOR",
    "DomainError",
    "StoreResult",
    "embed_text",
    "memory_add_tag",
    "memory_approve",
    "memory_confirm",
    "memory_correct",
    "memory_evict_over_cap",
    "memory_forget",
    "memory_merge",
    "memory_purge",
    "memory_restore",
    "memory_store",
    "memory_tombstone",
    "memory_update",
    "scan_secrets",
    "thread_end",
]

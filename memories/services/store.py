"""Store (SPEC §4 Store): a keyed upsert with compare-and-set, or an insert under a dedup policy;
reports near duplicates and previously corrected (tombstoned) look-alikes; evicts at the cap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memories import idempotency, validation
from memories.clock import resolve_now
from memories.dedup import Probe, near_duplicates
from memories.models import ChangeType, Memory, ReviewState, Status
from memories.revisions import revision_write, snapshot
from memories.serialization import iso, memory_json
from memories.services.common import MAX_RETRIES, embed_text, scan_secrets
from memories.services.eviction import cap_lock, evict_over_cap
from memories.services.lifecycle import expire
from memories.services.writes import change
from memories.visibility import visible_memories, visible_q
from memoryhub.errors import Conflict, NotFound, QuotaExceeded


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
    evict_over_cap(tenant=principal.tenant, agent=prepared.owner, now=now, exclude_ids=[memory.pk])
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
            expire(existing, actor=principal.actor, reason="expired", now=now)
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
            memory = change(
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

"""Store: a keyed upsert with compare-and-set, a `single` kind's replace,
or an insert under a dedup policy; reports near duplicates and previously corrected
(tombstoned) look-alikes; evicts at the cap (the agent's, the workspace's, or the subject's for
a user memory). Every write stores its effective expiry (`memories.retention`).

A store has two halves so that `Idempotency-Key` replays (`memories.idempotency.respond`) can
skip the first and hold their lock around the second only: `memory_store_prepare` needs no
database (validation, secret scan, embedding), `memory_store_write` is the transaction.
`memory_store` does both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db import IntegrityError, transaction

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memories import fingerprints, inputs, kind_registry, retention
from memories.clock import resolve_now
from memories.compiled import (
    CompiledSQL,
    Slot,
    principal_values,
    slot_principal,
)
from memories.dedup import NEAR_LIMIT, Near, Probe, near_duplicates_sent, near_duplicates_sql
from memories.horizon import announcement
from memories.models import (
    ChangeType,
    Memory,
    MemoryQuerySet,
    ReviewReason,
    ReviewState,
    Scope,
    Status,
    vector_literal,
)
from memories.revisions import revision_write, snapshot
from memories.services import eviction
from memories.services.eviction import cap_lock, cap_lock_name, owner_cap
from memories.services.lifecycle import expire
from memories.services.write_support import MAX_RETRIES
from memories.services.writes import change, embedding_for
from memories.visibility import formation_q, reads_from_ids, user_q, visible_memories, visible_q
from memoryhub.errors import Conflict, NotFound, QuotaExceeded
from memoryhub.pipeline import pipelined

# What a store did (the answer's `action`).
CREATED, UPDATED, REPLACED, SKIPPED = "created", "updated", "replaced", "skipped"
# The unique slots a concurrent store may take first: a key's, a single kind's.
_SLOT_CONSTRAINTS = ("memory_live_key_uniq", "memory_live_single_uniq")


@dataclass(frozen=True)
class StoreResult:
    """What a store did: `memory` was inserted (`created`), updated under its key, replaced as a
    single kind's one record, or, under `skip_if_near`, is the near duplicate that made storing
    unnecessary; `action` says which (`created`, `updated`, `replaced`, `skipped`), `message`
    in words (`Ok`, `Updated`, `Already remembered`). `memories.responses.store_response`
    renders it."""

    memory: Memory | None
    created: bool
    message: str
    action: str
    near_duplicates: list[Near] = field(default_factory=list)
    previously_corrected: list[Near] = field(default_factory=list)
    # A formed memory near a tombstone is not stored (`memory` is then that tombstone).
    blocked_by_correction: bool = False
    # A formed memory that would land outside the formation scope is not stored (`memory` is
    # then the memory its key names, or None).
    out_of_scope: bool = False


@dataclass(frozen=True)
class Formation:
    """A store of a fact extracted from a conversation (docs/formation.md), not an agent's own:
    it carries its `evidence`, waits for review only when `review_reason` names why (the
    agent's `review_below` / `extraction: review`; "" when it does not wait), and never re-adds
    what was tombstoned. It stays in the formation scope (`visibility.formation_q`):
    never a workspace memory, never a keyed upsert of a memory outside the scope, and its
    look-alikes (live and tombstoned) are looked for only inside the scope."""

    evidence: dict[str, Any]
    review_reason: str = ""


@dataclass(frozen=True)
class PreparedStore:
    """A validated store with its embedding, ready to write."""

    principal: Principal
    inp: inputs.StoreInput
    subject_id: str | None
    owner: Agent | None  # None: the workspace's, or (user scope) the subject's
    requested_expires_at: datetime | None  # `inp.expires_at` capped by the key's `memory_ttl`
    embedding: list[float]
    embedding_model: str
    content_hash: str
    size_bytes: int
    now: datetime
    formation: Formation | None = None
    now_given: bool = False  # the caller pinned `now`: the write is stamped with it

    @property
    def user_subject(self) -> str | None:
        """The subject owning a user memory (its cap's owner); None for any other."""
        return self.subject_id if self.inp.scope == Scope.USER else None

    @property
    def probe(self) -> Probe:
        return Probe(
            content_hash=self.content_hash,
            embedding=self.embedding,
            embedding_model=self.embedding_model,
        )


def memory_store(
    *, principal: Principal, data: dict[str, Any], now: datetime | None = None
) -> StoreResult:
    """Store a memory: `memory_store_prepare`, then `memory_store_write`."""
    return memory_store_write(
        prepared=memory_store_prepare(principal=principal, data=data, now=now)
    )


def memory_store_prepare(
    *,
    principal: Principal,
    data: Any,
    now: datetime | None = None,
    formation: Formation | None = None,
) -> PreparedStore:
    """Everything that needs no database: validation (the kind's rules from the tenant's
    cached registry), secret scan and the embedding."""
    principal.require_scope("write")
    now_given = now is not None
    now = resolve_now(now)
    registry = kind_registry.registry(principal.tenant)
    inp = inputs.parse_store(data, agent=principal.agent, now=now, registry=registry)
    subject_id = principal.resolve_subject(inp.subject_id)
    inputs.memory_fields_check(
        category=inp.category, thread_id=inp.thread_id, scope=inp.scope, subject_id=subject_id
    )
    user = inp.scope == Scope.USER
    vector, model = embedding_for(fingerprints.embedding_text(inp.text, inp.data))
    return PreparedStore(
        principal=principal,
        inp=inp,
        subject_id=subject_id,
        owner=None if inp.is_workspace or user else principal.agent,
        requested_expires_at=retention.requested_expiry(
            inp.expires_at, principal=principal, now=now
        ),
        embedding=vector,
        embedding_model=model,
        content_hash=fingerprints.content_hash(inp.text, inp.data),
        size_bytes=fingerprints.size_bytes(inp.text, inp.data),
        now=now,
        formation=formation,
        now_given=now_given,
    )


def memory_store_write(*, prepared: PreparedStore) -> StoreResult:
    """The transactional half of a store: one transaction (a savepoint in the caller's).

    Its rows are stamped when the transaction has announced itself (`horizon.announcement`,
    carried by its first statement, the kind guard's), not when the store was prepared: an
    embedding may take long, and a list walk that began meanwhile must not have passed the
    stamp already. (A `ttl` counts from the validation.)"""
    with transaction.atomic():
        return _store_write(prepared)


def _stamped(prepared: PreparedStore, stamp: datetime) -> PreparedStore:
    """`prepared` with its write's stamp for `now`."""
    if stamp == prepared.now:
        return prepared
    inp = prepared.inp
    if inp.last_confirmed_at == prepared.now:  # defaulted: confirmed by this write
        inp = replace(inp, last_confirmed_at=stamp)
    return replace(prepared, now=stamp, inp=inp)


def _store_write(prepared: PreparedStore) -> StoreResult:
    inp = prepared.inp
    announced = announcement(prepared.now if prepared.now_given else None)  # before any wait
    if prepared.formation is not None and prepared.owner is None and prepared.user_subject is None:
        # A workspace memory is the tenant's, not the thread's agent's (`formation_q`).
        return StoreResult(
            memory=None, created=False, message="Out of scope", action=SKIPPED, out_of_scope=True
        )
    # A plain store (no key, not a single kind's) usually inserts: its cap lock is taken with
    # the kind's, in one statement (`kind_registry.kind_guard`), and not again by `_insert`.
    cap_locked = not inp.key and not inp.kind_single
    # The look-alikes go with it (`memoryhub.pipeline`), for the cardinality the store was
    # validated with, as of the announcement's time (a moment before the stamp is read).
    dedup = _dedups(inp, single=inp.kind_single)
    looked = _stamped(prepared, announced.now or announced.floor)
    tenant, owner = prepared.principal.tenant, prepared.owner
    lock = cap_lock_name(tenant.pk, owner.pk if owner else None, prepared.user_subject)
    with pipelined():
        guard = kind_registry.kind_guard_sent(
            tenant,
            inp.kind,
            then_lock=lock if cap_locked else None,
            announce=announced,
            generic_plans=True,
        )
        look_alikes = _look_alikes_sent(looked, live=dedup)
    single = _kind_single(prepared, guard())
    prepared = _stamped(prepared, announced.stamp())
    inp = prepared.inp
    corrected, near = look_alikes()
    if _dedups(inp, single=single) != dedup:  # a registry change since the validation
        corrected, near = _look_alikes_sent(looked, live=not dedup)()
    if corrected and prepared.formation is not None:
        return StoreResult(
            memory=corrected[0][0],
            created=False,
            message="Previously corrected",
            action=SKIPPED,
            previously_corrected=corrected,
            blocked_by_correction=True,
        )
    if inp.key or single:
        return _upsert(prepared, corrected=corrected, single=single)

    if near and inp.dedup_policy == "skip_if_near":
        return StoreResult(
            memory=near[0][0],
            created=False,
            message="Already remembered",
            action=SKIPPED,
            near_duplicates=near,
            previously_corrected=corrected,
        )
    memory = _insert(prepared, near=bool(near), single=False, cap_locked=cap_locked)
    return StoreResult(
        memory=memory,
        created=True,
        message="Ok",
        action=CREATED,
        near_duplicates=near,
        previously_corrected=corrected,
    )


def _dedups(inp: inputs.StoreInput, *, single: bool) -> bool:
    """Whether the store looks for live look-alikes (its dedup policy's), not only tombstoned."""
    return not inp.key and not single and inp.dedup_policy != "insert"


def _kind_single(prepared: PreparedStore, registry: kind_registry.Registry) -> bool:
    """The kind's cardinality, under the kind's lock (`registry`: `kind_guard`'s): a registry
    change that committed since the store was validated is applied to it (its schema checked
    again)."""
    inp = prepared.inp
    if registry.version == inp.kinds_version:
        return inp.kind_single
    rule = registry.rule(inp.kind)
    kind_registry.check_data(rule, inp.data)
    return rule.single


def _store_fields(prepared: PreparedStore) -> dict[str, Any]:
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
        "occurred_at": inp.occurred_at,
        "requested_expires_at": prepared.requested_expires_at,
        "last_confirmed_at": inp.last_confirmed_at,
        "size_bytes": prepared.size_bytes,
        "content_hash": prepared.content_hash,
        "embedding": prepared.embedding,
        "embedding_model": prepared.embedding_model,
    }


def _check_quota(prepared: PreparedStore) -> None:
    tenant, owner = prepared.principal.tenant, prepared.owner
    cap = owner_cap(tenant, owner, prepared.user_subject)
    if cap <= 0:
        name = (
            "user_cap"
            if prepared.user_subject is not None
            else "entry_cap"
            if owner
            else "workspace_cap"
        )
        raise QuotaExceeded(f"The {name} is 0: nothing can be stored", details={name: cap})


def _review_reason(prepared: PreparedStore, *, near: bool) -> str:
    """Why this write waits for review ("" when it does not): a formed memory by its agent's
    review policy only; an agent's own store when it is `inferred`, or lands next to
    near-duplicates (`dedup_policy: ask`)."""
    if prepared.formation is not None:
        return prepared.formation.review_reason
    if prepared.inp.capture_mode == "inferred":
        return ReviewReason.INFERRED
    return ReviewReason.NEAR_DUPLICATE if near else ""


def _insert(
    prepared: PreparedStore, *, near: bool, single: bool, cap_locked: bool = False
) -> Memory:
    principal, inp, now = prepared.principal, prepared.inp, prepared.now
    _check_quota(prepared)
    if not cap_locked:  # before the insert touches the counter row
        cap_lock(principal.tenant, prepared.owner, prepared.user_subject)
    reason = _review_reason(prepared, near=near)
    review = ReviewState.PENDING if reason else ReviewState.NONE
    fields = _store_fields(prepared)
    memory = Memory(
        tenant=principal.tenant,
        agent=prepared.owner,
        created_by=principal.actor,
        key=inp.key,
        scope=inp.scope,
        kind_single=single,
        subject_id=prepared.subject_id,
        created_at=now,
        updated_at=now,
        last_accessed_at=now,
        review_state=review,
        review_reason=reason,
        evidence=prepared.formation.evidence if prepared.formation else None,
        expires_at=retention.effective_expiry(
            requested=prepared.requested_expires_at,
            last_write=now,
            category=inp.category,
            tenant=principal.tenant,
            owner=prepared.owner,
        ),
        **fields,
    )
    with pipelined():  # the insert and the owner's count after it: one round trip
        revision_write(
            insert=True,  # the memory, its revision and its events: one statement
            memory=memory,
            actor=principal.actor,
            change_type=ChangeType.CREATE,
            after=snapshot(memory),
            now=now,
        )
        active = eviction.active_count_sent(principal.tenant, prepared.owner, prepared.user_subject)
    eviction.evict_over_cap(
        tenant=principal.tenant,
        agent=prepared.owner,
        now=now,
        exclude_ids=[memory.pk],
        cap_locked=True,
        user_subject=prepared.user_subject,
        active=active,
    )
    return memory


def _slot(prepared: PreparedStore, **slot: Any) -> Memory | None:
    """The active row holding a unique slot of this store's owner and subject: its key
    (`key=`), or its single kind's one record (`kind=`, `kind_single=True`). It may be past
    `expires_at`: the slot is taken until it is expired."""
    principal = prepared.principal
    rows = Memory.objects.for_tenant(principal.tenant).select_related("agent")
    if prepared.user_subject is not None:
        rows = rows.filter(user_q(prepared.user_subject))
    else:
        rows = rows.filter(agent=prepared.owner, scope=Scope.AGENT)
        rows = rows.filter(subject_id=prepared.subject_id)
    memory = rows.filter(status=Status.ACTIVE, **slot).first()
    if memory is not None:  # the policies its expiry is computed from (`retention`)
        memory.tenant = principal.tenant
    return memory


def _existing(prepared: PreparedStore, *, single: bool) -> Memory | None:
    """The memory a keyed or single-kind store writes into: the one under its key, else its
    single kind's one record. A key held by another record than the kind's one is a conflict:
    the store would leave two."""
    inp = prepared.inp
    keyed = _slot(prepared, key=inp.key) if inp.key else None
    record = _slot(prepared, kind=inp.kind, kind_single=True) if single else None
    if keyed is not None and record is not None and keyed.pk != record.pk:
        raise Conflict(
            f"The key is held by another memory than this owner's one '{inp.kind}'",
            details={"current_version": record.version, "memory_id": record.pk},
        )
    return keyed or record


def _upsert(prepared: PreparedStore, *, corrected: list[Near], single: bool) -> StoreResult:
    principal, inp, now = prepared.principal, prepared.inp, prepared.now
    cas = inp.cas
    tenant = principal.tenant
    for _ in range(MAX_RETRIES):
        existing = _existing(prepared, single=single)
        if existing is not None and not _formation_may_change(prepared, existing):
            return StoreResult(
                memory=existing,
                created=False,
                message="Out of scope",
                action=SKIPPED,
                out_of_scope=True,
            )
        if existing is not None and existing.expires_at and existing.expires_at <= now:
            # Invisible already; expire it so the slot is free for the new fact.
            cap_lock(tenant, prepared.owner, prepared.user_subject)
            expire(existing, actor=principal.actor, reason="expired", now=now)
            existing = None
        if existing is None:
            if cas is not None and not cas.create_only:
                raise Conflict(details={"current_version": 0})
            try:
                with transaction.atomic():
                    memory = _insert(prepared, near=False, single=single)
            except IntegrityError as exc:
                if not any(name in str(exc) for name in _SLOT_CONSTRAINTS):
                    raise
                if cas is not None:
                    current = _existing(prepared, single=single)
                    raise Conflict(
                        details={"current_version": current.version if current else 0}
                    ) from None
                continue  # a concurrent store took the slot: write into it instead
            return StoreResult(
                memory=memory,
                created=True,
                message="Ok",
                action=CREATED,
                previously_corrected=corrected,
            )
        fields = _store_fields(prepared) | {"kind_single": single}
        if inp.key:
            fields["key"] = inp.key
        if prepared.formation is not None:
            fields["evidence"] = prepared.formation.evidence
        reason = _review_reason(prepared, near=False)
        if reason:
            fields["review_state"], fields["review_reason"] = ReviewState.PENDING, reason
        replaced = not inp.key or existing.key != inp.key
        try:
            memory = change(
                existing,
                fields=fields,
                actor=principal.actor,
                change_type=ChangeType.UPDATE,
                now=now,
                cas=cas,
                reload=None,
                reason="replaced" if replaced else "",
            )
        except NotFound:
            continue  # it was forgotten meanwhile: the slot is free again
        except Conflict:
            if cas is not None:
                raise
            continue
        except IntegrityError as exc:
            # A keyed memory becoming its kind's one record while a concurrent store inserted
            # that record: look again (the key's memory now conflicts with it).
            if "memory_live_single_uniq" not in str(exc):
                raise
            continue
        return StoreResult(
            memory=memory,
            created=False,
            message="Updated",
            action=REPLACED if replaced else UPDATED,
            previously_corrected=corrected,
        )
    raise Conflict(details={"current_version": None})


def _formation_may_change(prepared: PreparedStore, memory: Memory) -> bool:
    """Whether a formed store may change `memory` (`visibility.formation_q`); any other store
    may change what its key names."""
    if prepared.formation is None:
        return True
    scope = formation_q(agent=prepared.principal.agent, subject_id=prepared.subject_id)
    return Memory.objects.for_tenant(prepared.principal.tenant).filter(scope, pk=memory.pk).exists()


def look_alike_sets(
    tenant: Tenant | int,
    agent: Agent,
    subject_id: str | None,
    now: datetime | None,
    *,
    live: bool,
    formation: bool = False,
) -> list[MemoryQuerySet]:
    """Where a store's look-alikes are: the tombstones the agent can see (content not purged)
    and, when `live`, the live memories it can see. For a `formation` store both are confined
    to the formation scope (`visibility.formation_q`): a subject-less or workspace
    look-alike never absorbs a fact formed for a subject."""
    scope = (
        formation_q(agent=agent, subject_id=subject_id)
        if formation
        else visible_q(agent=agent, subject_id=subject_id)
    )
    sets = [
        Memory.objects.for_tenant(tenant)
        .filter(status=Status.TOMBSTONED, purged_at__isnull=True)
        .filter(scope)
    ]
    if live:
        if formation:
            sets.append(Memory.objects.for_tenant(tenant).live(resolve_now(now)).filter(scope))
        else:
            sets.append(
                visible_memories(tenant=tenant, agent=agent, subject_id=subject_id, now=now)
            )
    return sets


@lru_cache(maxsize=64)
def _look_alike_statement(
    *, subject: bool, shared: int, live: bool, vector: bool, formation: bool
) -> CompiledSQL:
    """`_look_alikes_sent`' statement for one shape, compiled once per process: building and
    compiling its querysets was a third of a store's CPU."""
    slots = Slot()
    principal = slot_principal(slots, shared=shared)
    vector_slot, model_slot = (slots.text("vector"), slots.text("model")) if vector else (None, "")
    probe = Probe(
        content_hash=slots.text("hash"), embedding=vector_slot, embedding_model=model_slot
    )
    subject_slot = slots.text("subject") if subject else None
    sets = look_alike_sets(
        principal.tenant.pk, principal.agent, subject_slot, slots.time("now") if live else None,
        live=live, formation=formation,
    )  # fmt: skip
    threshold = slots.float("threshold") if vector else 0.0
    # It sets back the plan mode its store's kind guard set (`kind_guard(generic_plans=True)`).
    flat = [(rows, probe) for rows in sets]
    sql, params = near_duplicates_sql(
        flat, threshold=threshold, limit=NEAR_LIMIT, plan_mode_reset=True
    )
    return CompiledSQL(sql, params, slots, inline=True)


def look_alike_statement(prepared: PreparedStore, *, live: bool) -> tuple[str, list[Any]]:
    """`near_duplicates_sql` of `look_alike_sets` for this store, from the statement compiled
    for its shape."""
    principal = prepared.principal
    formation = prepared.formation is not None
    shared = [] if formation else reads_from_ids(principal.agent)  # formation reads none
    vector = prepared.embedding is not None
    statement = _look_alike_statement(
        subject=bool(prepared.subject_id),
        shared=len(shared),
        live=live,
        vector=vector,
        formation=formation,
    )
    return statement.bind(
        **principal_values(principal, shared),
        subject=prepared.subject_id,
        now=prepared.now,
        hash=prepared.content_hash,
        vector=vector_literal(prepared.embedding) if vector else None,
        model=prepared.embedding_model,
        threshold=principal.agent.dedup_threshold,
    )


def _look_alikes_sent(
    prepared: PreparedStore, *, live: bool
) -> Callable[[], tuple[list[Near], list[Near]]]:
    """Tombstones the agent can see (content not purged) that said the same thing, and, when
    `live`, the live memories it can see that say it: one statement for both, executed; the
    function returned reads them (after a pipeline's end)."""
    sent = near_duplicates_sent(
        look_alike_statement(prepared, live=live),
        [1, 1] if live else [1],
        threshold=prepared.principal.agent.dedup_threshold,
        agents=[prepared.principal.agent],
    )

    return lambda: (lambda sets: (sets[0][0], sets[1][0] if live else []))(sent())

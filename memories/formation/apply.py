"""Applying a model's operations (SPEC §11) through the ordinary services: the secret scan,
validation, dedup, caps and compare-and-set of an explicit store apply to every extracted fact.

Each operation runs in a savepoint of the caller's transaction, so one refused operation (a
conflict, a secret) leaves the others; the caller commits them together with the thread's
watermark. Revisions are written by `system:extract`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction

from accounts.models import Extraction
from accounts.principal import Principal
from memories import validation
from memories.formation.operations import AddOp, ConfirmOp, ForgetOp, Operation, UpdateOp
from memories.models import Category, ExtractionRun, Message, Thread
from memories.serialization import iso
from memories.services.changes import memory_confirm, memory_update
from memories.services.eviction import cap_lock
from memories.services.lifecycle import memory_forget
from memories.services.store import Formation, memory_store_prepare, memory_store_write
from memories.services.writes import embeddings_remembered, embeddings_seed
from memoryhub import tracing
from memoryhub.errors import Conflict, DomainError, InvalidInput, NotFound, SecretRejected

ACTOR = "system:extract"
SOURCE_CHARS = 100  # Memory.source_provider

# Every outcome an operation can have; the run's `counts` holds each (zeros included).
OUTCOMES = (
    "added",
    "updated",
    "forgotten",
    "confirmed",
    "duplicate",
    "conflict",
    "blocked_by_correction",
    "secret_dropped",
    "low_confidence",
    "category_not_allowed",
    "invalid",
    "pending_review",
)


@dataclass
class Outcome:
    counts: Counter = field(default_factory=Counter)

    @property
    def added(self) -> int:
        return self.counts["added"]

    @property
    def updated(self) -> int:
        return self.counts["updated"]

    def as_dict(self) -> dict[str, int]:
        return {name: self.counts[name] for name in OUTCOMES}


def extraction_principal(thread: Thread) -> Principal:
    """The thread's agent acting for the thread's subject, recorded as `system:extract`."""
    return Principal(
        tenant=thread.tenant,
        agent=thread.agent,
        scopes=frozenset({"read", "write"}),
        bound_subject=thread.subject_id,
        actor_name=ACTOR,
    )


def _evidence(run: ExtractionRun, thread: Thread, seqs: list[int]) -> dict:
    """The messages a memory came from: only seqs this run showed the model count."""
    kept = sorted({s for s in seqs if run.from_seq <= s <= run.to_seq})
    return {"thread_id": thread.thread_id, "messages": kept, "run_id": run.pk}


def _occurred_at(operation: AddOp, run: ExtractionRun, thread: Thread) -> str | None:
    """When the added fact happened: the model's `occurred_at` when it gives a readable one,
    else the time of the first message it names as evidence (SPEC §11)."""
    if operation.occurred_at:
        try:
            return iso(validation.parse_timestamp(operation.occurred_at, "occurred_at"))
        except InvalidInput:
            pass
    seqs = _evidence(run, thread, operation.evidence)["messages"]
    if not seqs:
        return None
    first = (
        Message.objects.for_tenant(thread.tenant_id)
        .filter(thread=thread, seq__in=seqs)
        .order_by("seq")
        .values_list("created_at", flat=True)
        .first()
    )
    return iso(first)


def apply_operations(
    *, run: ExtractionRun, thread: Thread, operations: list[Operation], now: datetime
) -> Outcome:
    """Apply `operations` in order; returns the count of each outcome."""
    outcome = Outcome()
    agent = thread.agent
    principal = extraction_principal(thread)
    texts = [op.text for op in operations if isinstance(op, AddOp | UpdateOp)]
    with tracing.span("apply", operations=len(operations)), embeddings_remembered():
        embeddings_seed(texts)  # one forward pass for the run, before any row is locked
        _lock_caps(thread, operations)
        for operation in operations:
            try:
                with transaction.atomic():
                    name = _apply_one(
                        operation, run=run, thread=thread, principal=principal, now=now
                    )
            except SecretRejected:
                name = "secret_dropped"
            except Conflict:
                name = "conflict"
            except (InvalidInput, NotFound, DomainError):
                name = "invalid"
            outcome.counts[name] += 1
            if name == "added" and _pending(operation, agent):
                outcome.counts["pending_review"] += 1
    return outcome


def _lock_caps(thread: Thread, operations: list[Operation]) -> None:
    """The cap locks the run's adds will take, taken first: the operations share one
    transaction, and an update or forget before an add would otherwise hold a sequence's lock
    or an owner's counter row while waiting for the cap lock, the reverse of a store's order
    (`memories.services.sequences`), and deadlock with a concurrent store."""
    if not operations:
        return
    cap_lock(thread.tenant, thread.agent)
    if any(isinstance(op, AddOp) and op.category == Category.WORKSPACE for op in operations):
        cap_lock(thread.tenant, None)


def _pending(operation: Operation, agent) -> bool:
    return agent.extraction == Extraction.REVIEW or operation.confidence < agent.review_below


def _apply_one(
    operation: Operation,
    *,
    run: ExtractionRun,
    thread: Thread,
    principal: Principal,
    now: datetime,
) -> str:
    agent = thread.agent
    if isinstance(operation, AddOp):
        if operation.confidence < agent.extraction_min_confidence:
            return "low_confidence"
        if operation.category not in agent.extraction_categories:
            return "category_not_allowed"
        data = {
            "text": operation.text,
            "category": operation.category,
            "kind": operation.kind,
            "tags": operation.tags,
            "confidence": operation.confidence,
            "mentions": [{"name": m.name, "type": m.type} for m in operation.mentions],
            "capture_mode": "inferred",
            "source_provider": f"extraction:{run.model}"[:SOURCE_CHARS],
            "thread_id": thread.thread_id,
            "occurred_at": _occurred_at(operation, run, thread),
            "dedup_policy": "skip_if_near",
        }
        if operation.key:
            data["key"] = operation.key
        prepared = memory_store_prepare(
            principal=principal,
            data=data,
            now=now,
            formation=Formation(
                evidence=_evidence(run, thread, operation.evidence),
                pending=_pending(operation, agent),
            ),
        )
        result = memory_store_write(prepared=prepared)
        if result.blocked_by_correction:
            return "blocked_by_correction"
        if not result.created and result.message == "Already remembered":
            memory_confirm(principal=principal, memory_id=result.memory.pk, now=now)
            return "duplicate"
        return "added" if result.created else "updated"
    if isinstance(operation, UpdateOp):
        if operation.confidence < agent.extraction_min_confidence:
            return "low_confidence"
        memory_update(
            principal=principal,
            memory_id=operation.memory_id,
            data={
                "text": operation.text,
                "confidence": operation.confidence,
                "expected_version": operation.version,
            },
            evidence=_evidence(run, thread, operation.evidence),
            now=now,
        )
        return "updated"
    if isinstance(operation, ForgetOp):
        deleted, _ = memory_forget(
            principal=principal,
            memory_id=operation.memory_id,
            reason=operation.reason,
            expected_version=operation.version,
            now=now,
        )
        return "forgotten" if deleted else "invalid"
    if isinstance(operation, ConfirmOp):
        memory_confirm(principal=principal, memory_id=operation.memory_id, now=now)
        return "confirmed"
    return "invalid"

"""Applying a model's operations (docs/formation.md) through the ordinary services: the secret scan,
validation, dedup, caps and compare-and-set of an explicit store apply to every extracted fact.

Confinement (the rule is `visibility.formation_q`): an `update`, `forget` or
`confirm` reaches the services only for a memory the run offered the model as changeable
(`ExtractionRun.offered_ids`) that is still live and in the formation scope. An operation on
any other memory the thread's agent owns and sees for the thread's subject (a subject-less or
workspace memory, shown read-only; a `conversation` memory; one the run did not show) is
dropped as `out_of_scope`, and so is one on another subject's user memory (a memory of the
kind formation may change, not of this thread's subject); one on a memory it cannot see at all
(another subject's memory of an agent, another agent's or tenant's, a missing or forgotten one)
is `invalid`, as the API answers 404 for both. An `add` is confined by the store
(`services.store.Formation`): never a workspace memory, a `single` kind's record replaced only
inside the scope, and near duplicates looked for inside the scope only. An `add` may be
user-scoped only in a thread with a subject whose agent allows it
(`user_scope_allowed`); elsewhere it is formed for the agent. Its `data` is checked against its
kind's schema by the store; a failure drops it as `invalid`.

Bounded transactions: operations are applied `APPLY_BATCH` at a time, each batch in a
transaction of its own that first re-checks (and locks) the run, so an erasure that failed or
deleted it meanwhile stops the rest; that takes the agent's cap lock only when the batch adds,
and only for that batch, so the agent's own stores wait for one batch at most; and that records
the run's progress (`applied_ops`, `counts`) with the batch's writes, so a run retried after its
worker died resumes after the last committed batch and never applies an operation twice. Within a
batch each operation runs in a savepoint, so one refused operation (a conflict, a secret)
leaves the others. Revisions are written by `system:extract`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import cast

from django.db import transaction

from accounts.models import Extraction
from accounts.principal import Principal
from memories import validation
from memories.formation.operations import AddOp, ConfirmOp, ForgetOp, Operation, UpdateOp
from memories.models import ExtractionRun, Memory, Message, ReviewReason, RunState, Scope, Thread
from memories.serialization import iso
from memories.services.changes import memory_confirm, memory_update
from memories.services.eviction import cap_lock
from memories.services.lifecycle import memory_forget
from memories.services.store import Formation, memory_store_prepare, memory_store_write
from memories.services.writes import embeddings_remembered, embeddings_seed
from memories.visibility import formation_changeable, formation_known_q
from memoryhub import tracing
from memoryhub.errors import Conflict, DomainError, InvalidInput, NotFound, SecretRejected

APPLY_BATCH = 10  # operations per transaction: how long the agent's cap lock may be held
# In a run's kept answer: the first message seq the prompt showed (the earlier context's first,
# else the first new one); evidence may cite any seq from it to the run's last.
CONTEXT_FROM_SEQ = "context_from_seq"
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
    "out_of_scope",
    "over_limit",
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


def user_scope_allowed(thread: Thread) -> bool:
    """Whether a formed `add` may be user-scoped: the thread has a subject and its
    agent's `formation_user_scope` is on. Otherwise such an add is formed for the agent."""
    return bool(thread.subject_id) and thread.agent.formation_user_scope


def _evidence(run: ExtractionRun, thread: Thread, seqs: list[int]) -> dict:
    """The messages a memory came from: only seqs this run showed the model count, the
    earlier messages shown as context included."""
    first = (run.answer or {}).get(CONTEXT_FROM_SEQ, run.from_seq)
    kept = sorted({s for s in seqs if first <= s <= run.to_seq})
    return {"thread_id": thread.thread_id, "messages": kept, "run_id": run.pk}


def _occurred_at(operation: AddOp, run: ExtractionRun, thread: Thread) -> str | None:
    """When the added fact happened: the model's `occurred_at` when it gives a readable one,
    else the time of the first message it names as evidence."""
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


class ApplyDeadline(Exception):
    """Applying ran past the run's deadline (its task's time limit): the batches committed so
    far stay, recorded on the run."""


def apply_operations(
    *,
    run: ExtractionRun,
    thread: Thread,
    operations: list[Operation],
    now: datetime,
    deadline: float | None = None,
) -> Outcome | None:
    """Apply `operations` in order from `run.applied_ops` on, batch by batch; returns the count
    of each outcome, the earlier attempts' included, or None when the run is no longer this
    worker's to apply (failed or deleted by an erasure, finished by another worker).

    `deadline` (a `time.monotonic()` value) stops it between batches with `ApplyDeadline`."""
    outcome = Outcome(counts=Counter(run.counts or {}))
    principal = extraction_principal(thread)
    offered = frozenset(run.offered_ids or ())
    texts = [op.text for op in operations[run.applied_ops :] if isinstance(op, AddOp | UpdateOp)]
    with tracing.span("apply", operations=len(operations)), embeddings_remembered():
        embeddings_seed(texts)  # one forward pass for the run, before any row is locked
        for start in range(run.applied_ops, len(operations), APPLY_BATCH):
            if deadline is not None and time.monotonic() >= deadline:
                raise ApplyDeadline(
                    f"applying passed the task's time limit ({start} of {len(operations)} "
                    "operations applied)"
                )
            batch = operations[start : start + APPLY_BATCH]
            with transaction.atomic():
                if not _still_running(run):
                    return None
                _lock_caps(thread, batch)
                scope = _scope(thread, batch, now)
                for operation in batch:
                    name = _outcome(
                        operation,
                        run=run,
                        thread=thread,
                        principal=principal,
                        scope=scope,
                        offered=offered,
                        now=now,
                    )
                    outcome.counts[name] += 1
                    if (
                        isinstance(operation, AddOp)
                        and name in ("added", "updated")
                        and _review_reason(operation, thread.agent)
                    ):
                        outcome.counts["pending_review"] += 1
                run.applied_ops, run.counts = start + len(batch), outcome.as_dict()
                ExtractionRun.objects.filter(pk=run.pk).update(
                    applied_ops=run.applied_ops, counts=run.counts
                )
    return outcome


def _still_running(run: ExtractionRun) -> bool:
    """Lock the run's row for this batch; False when it is no longer `running` (or gone)."""
    states = (
        ExtractionRun.objects.select_for_update().filter(pk=run.pk).values_list("state", flat=True)
    )
    return list(states) == [RunState.RUNNING]


def _scope(thread: Thread, batch: list[Operation], now: datetime) -> dict[str, bool]:
    """The memories the batch's update/forget/confirm operations name that the thread's agent
    owns and sees for the thread's subject, and the tenant's user memories of any subject, live:
    id → whether formation may change it (`visibility.formation_q`). A name missing here is no
    memory the agent could change."""
    ids = {op.memory_id for op in batch if not isinstance(op, AddOp)}
    if not ids:
        return {}
    agent, subject_id = thread.agent, thread.subject_id
    operable = formation_changeable(agent=agent, subject_id=subject_id)
    return dict(
        Memory.objects.for_tenant(thread.tenant_id)
        .live(now)
        .filter(formation_known_q(agent=agent, subject_id=subject_id), pk__in=ids)
        .annotate(operable=operable)
        .values_list("pk", "operable")
    )


def _outcome(
    operation: Operation,
    *,
    run: ExtractionRun,
    thread: Thread,
    principal: Principal,
    scope: dict[str, bool],
    offered: frozenset[str],
    now: datetime,
) -> str:
    """Apply one operation in a savepoint; its outcome."""
    if not isinstance(operation, AddOp):
        operable = scope.get(operation.memory_id)
        if operable is None:
            return "invalid"
        if not operable or operation.memory_id not in offered:
            return "out_of_scope"
    try:
        with transaction.atomic():
            return _apply_one(operation, run=run, thread=thread, principal=principal, now=now)
    except SecretRejected:
        return "secret_dropped"
    except Conflict:
        return "conflict"
    except (InvalidInput, NotFound, DomainError):
        return "invalid"


def _lock_caps(thread: Thread, batch: list[Operation]) -> None:
    """The caps' locks, taken first when the batch adds: the agent's, and the subject's user
    cap when the batch may add a user memory. Its operations share one transaction, and an
    update or forget before an add would otherwise hold a sequence's lock or the owner's counter
    row while waiting for the cap lock, the reverse of a store's order
    (`memories.services.sequences`), and deadlock with a concurrent store. (A formed add is
    never a workspace memory, so the workspace's cap lock is never needed.)"""
    adds = [op for op in batch if isinstance(op, AddOp)]
    if adds:
        cap_lock(thread.tenant, thread.agent)
    if any(op.scope == Scope.USER for op in adds) and user_scope_allowed(thread):
        cap_lock(thread.tenant, None, thread.subject_id)


def _review_reason(operation: AddOp | UpdateOp, agent) -> str:
    """Why a formed memory waits for review ("" when it does not): the agent's policy, or a
    confidence below its `review_below`."""
    if agent.extraction == Extraction.REVIEW:
        return ReviewReason.AGENT_POLICY
    return ReviewReason.LOW_CONFIDENCE if operation.confidence < agent.review_below else ""


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
        if operation.data is not None:
            data["data"] = operation.data
        if operation.scope == Scope.USER and user_scope_allowed(thread):
            data["scope"] = Scope.USER
        prepared = memory_store_prepare(
            principal=principal,
            data=data,
            now=now,
            formation=Formation(
                evidence=_evidence(run, thread, operation.evidence),
                review_reason=_review_reason(operation, agent),
            ),
        )
        result = memory_store_write(prepared=prepared)
        if result.out_of_scope:
            return "out_of_scope"
        if result.blocked_by_correction:
            return "blocked_by_correction"
        if not result.created and result.message == "Already remembered":
            found = cast(Memory, result.memory)  # the memory a duplicate store found
            memory_confirm(principal=principal, memory_id=found.pk, now=now)
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

"""Extraction runs (SPEC §11): when a thread is extracted, and the life of one run.

A run is requested (`run_request`) by the sleep-time schedule (`extract_due_threads`, idle
threads picked with SKIP LOCKED), by `extract: "now"`, by `/extract`, by `/end` and by the
console; a thread has at most one open (queued or running) run, so two triggers at once give
one run. `run_execute` then:

1. claims the run (queued → running) and holds a session advisory lock while it works, so a
   run whose worker died (the lock is gone with its connection) can be told from a live one
   and taken over;
2. defers it when the tenant's daily token budget is spent;
3. asks the model once: the validated answer is committed on the run *before* anything is
   applied, so a retry after a crash applies that answer instead of asking (and paying) again;
4. applies the operations, moves the thread's watermark and marks the run `done` in ONE
   transaction: a crash before the commit applies nothing, so a retry applies everything once;
5. folds old messages into the rolling summary once they exceed the agent's threshold.

Model failures (after the client's own retries) and malformed answers fail the run with the
error recorded; nothing is applied and the watermark stays, so the messages wait for the next
trigger.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from datetime import datetime, timedelta
from functools import partial

from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone
from django_q.tasks import async_task

from accounts.models import Extraction
from memories.clock import resolve_now
from memories.events.record import extraction_event_write
from memories.formation.apply import apply_operations
from memories.formation.context import (
    message_window,
    related_memories,
    unsummarised,
    unsummarised_bytes,
)
from memories.formation.llm import LLMClient, LLMError, get_llm, llm_configured
from memories.formation.operations import Operation, operation_json, parse_operations
from memories.models import OPEN_RUN_STATES, ExtractionRun, RunState, Thread
from memories.secrets_scan import find_secret
from memories.services.common import session_advisory
from memoryhub import metrics

log = logging.getLogger(__name__)

_LIVENESS_NAMESPACE = 0x4D48_5852  # "MHXR": one session lock per running run
DUE_BATCH = 50
# Test hook: a worker that must die between the model's answer and the apply (SPEC §11's crash
# test) sets this to "after_answer"; nothing else reads it.
FAULT_ENV = "MEMORYHUB_EXTRACTION_FAULT"


# --- requesting ------------------------------------------------------------------------------


def run_request(*, thread: Thread, trigger: str, now: datetime | None = None) -> ExtractionRun:
    """Queue an extraction of `thread`; an open run of the thread is returned instead.

    The run is handed to the django-q2 cluster when the caller's transaction commits.
    """
    now = resolve_now(now)
    run = _open_run(thread)
    if run is None:
        try:
            with transaction.atomic():
                run = ExtractionRun.objects.create(
                    tenant_id=thread.tenant_id,
                    thread=thread,
                    agent_id=thread.agent_id,
                    trigger=trigger,
                    created_at=now,
                )
        except IntegrityError:  # another trigger opened one in between
            run = _open_run(thread)
            if run is None:
                raise
            return run
        transaction.on_commit(partial(enqueue_run, run.pk))
    Thread.objects.filter(pk=thread.pk).update(extraction_due_at=None)
    thread.extraction_due_at = None
    return run


def _open_run(thread: Thread) -> ExtractionRun | None:
    return (
        ExtractionRun.objects.for_tenant(thread.tenant_id)
        .filter(thread=thread, state__in=OPEN_RUN_STATES)
        .first()
    )


def enqueue_run(run_id: int) -> None:
    async_task("memories.formation.runs.run_execute", run_id, group="extraction")


def extract_due_threads(*, now: datetime | None = None, limit: int = DUE_BATCH) -> int:
    """The sleep-time schedule: request a run for every thread idle past its due time, and
    re-queue runs whose worker died. Safe with several schedulers at once (SKIP LOCKED)."""
    now = resolve_now(now)
    requeued = _requeue_abandoned()
    if not llm_configured():
        return requeued
    requested = 0
    with transaction.atomic():
        due = (
            Thread.objects.filter(extraction_due_at__lte=now)
            .order_by("extraction_due_at")
            .select_for_update(skip_locked=True)[:limit]
        )
        for thread in due:
            run_request(thread=thread, trigger="schedule", now=now)
            requested += 1
    return requested + requeued


# --- liveness --------------------------------------------------------------------------------


def _advisory(function: str, run_id: int) -> bool:
    return session_advisory(function, _LIVENESS_NAMESPACE, run_id)


def _requeue_abandoned() -> int:
    """Runs left `running` by a worker that died go back to `queued` and to the cluster."""
    requeued = 0
    for run_id in ExtractionRun.objects.filter(state=RunState.RUNNING).values_list("pk", flat=True):
        if not _advisory("pg_try_advisory_lock", run_id):
            continue  # a live worker holds it
        try:
            if ExtractionRun.objects.filter(pk=run_id, state=RunState.RUNNING).update(
                state=RunState.QUEUED
            ):
                transaction.on_commit(partial(enqueue_run, run_id))
                requeued += 1
        finally:
            _advisory("pg_advisory_unlock", run_id)
    return requeued


def _claim(run_id: int, now: datetime) -> ExtractionRun | None:
    """Take the run: a queued one, or a running one whose worker is gone. None: not ours."""
    if not _advisory("pg_try_advisory_lock", run_id):
        return None  # a live worker is on it
    claimed = ExtractionRun.objects.filter(pk=run_id, state__in=OPEN_RUN_STATES).update(
        state=RunState.RUNNING, started_at=now, attempts=F("attempts") + 1
    )
    if not claimed:
        _advisory("pg_advisory_unlock", run_id)
        return None
    run = ExtractionRun.objects.select_related("thread", "agent", "tenant").get(pk=run_id)
    # The thread's agent and tenant are the run's own rows: not loaded a second time.
    run.thread.agent, run.thread.tenant = run.agent, run.tenant
    return run


# --- executing -------------------------------------------------------------------------------


def run_execute(
    run_id: int, *, llm: LLMClient | None = None, now: datetime | None = None
) -> ExtractionRun | None:
    """Execute one run (the django-q2 task). Returns the run, or None when it is not this
    worker's (finished already, or a live worker holds it)."""
    now = resolve_now(now)
    run = _claim(run_id, now)
    if run is None:
        return None
    started = time.monotonic()
    llm_ms_before = run.llm_ms
    try:
        _execute(run, llm=llm, now=now)
    except LLMError as exc:
        _fail(run, type(exc).__name__, str(exc), usage=exc.usage, latency_ms=exc.latency_ms)
    except Exception as exc:  # noqa: BLE001 - recorded on the run, shown in the console
        log.exception("extraction run %s failed", run.pk)
        _fail(run, type(exc).__name__, str(exc)[:2000])
    finally:
        spent = int((time.monotonic() - started) * 1000)
        run.server_ms += max(spent - (run.llm_ms - llm_ms_before), 0)
        ExtractionRun.objects.filter(pk=run.pk).update(server_ms=run.server_ms)
        _advisory("pg_advisory_unlock", run.pk)
    return run


def _execute(run: ExtractionRun, *, llm: LLMClient | None, now: datetime) -> None:
    thread, agent = run.thread, run.agent
    if agent.extraction == Extraction.OFF:
        _finish(
            run, thread, counts={}, now=now, note="Extraction is off for this agent", more=False
        )
        return
    if _budget_spent(run, now):
        _defer(run, thread, now)
        return
    if run.answer is None:
        messages = message_window(thread)
        if not messages:
            # Nothing after the watermark is left (deleted by erasure or retention): the
            # watermark catches up, so the thread is not due again for messages it lacks.
            thread.extracted_seq = thread.last_seq
            _finish(run, thread, counts={}, now=now, more=False)
            return
        llm = llm or get_llm()
        answer = llm.extract(
            summary=thread.summary,
            messages=messages,
            memories=related_memories(thread=thread, messages=messages),
        )
        run.answer = _storable(answer.operations)
        run.from_seq, run.to_seq = messages[0].seq, messages[-1].seq
        run.model, run.prompt_version = answer.model, answer.prompt_version
        run.prompt_tokens += answer.usage.prompt_tokens
        run.completion_tokens += answer.usage.completion_tokens
        run.llm_ms += answer.latency_ms
        run.save(
            update_fields=[
                "answer",
                "from_seq",
                "to_seq",
                "model",
                "prompt_version",
                "prompt_tokens",
                "completion_tokens",
                "llm_ms",
            ]
        )
    if os.environ.get(FAULT_ENV) == "after_answer":
        os.kill(os.getpid(), signal.SIGKILL)
    operations = parse_operations_json(run.answer)
    with transaction.atomic():
        locked = ExtractionRun.objects.select_for_update().get(pk=run.pk)
        if locked.state != RunState.RUNNING:
            return  # finished by another worker meanwhile
        thread = Thread.objects.select_for_update().get(pk=thread.pk)
        thread.agent, thread.tenant = agent, run.tenant
        outcome = apply_operations(run=run, thread=thread, operations=operations, now=now)
        outcome.counts["secret_dropped"] += run.answer.get("secret_dropped", 0)
        thread.extracted_seq = max(thread.extracted_seq, run.to_seq)
        thread.memories_added += outcome.added
        thread.memories_updated += outcome.updated
        _finish(run, thread, counts=outcome.as_dict(), now=now)
    _summarise_if_due(run, thread, llm=llm, now=now)


def _storable(operations: list[Operation]) -> dict:
    """The answer as kept on the run: an operation holding anything secret-shaped is dropped
    here (counted `secret_dropped`), so no secret is stored, even in the run's record."""
    kept, dropped = [], 0
    for operation in operations:
        raw = operation_json(operation)
        if find_secret(raw, "operation") is None:
            kept.append(raw)
        else:
            dropped += 1
    return {"operations": kept, "secret_dropped": dropped}


def parse_operations_json(answer: dict) -> list[Operation]:
    return parse_operations(json.dumps({"operations": answer["operations"]}))


def _finish(
    run: ExtractionRun,
    thread: Thread,
    *,
    counts: dict,
    now: datetime,
    note: str = "",
    more: bool = True,
) -> None:
    """Mark the run done and the thread's schedule: due again at once if messages still wait
    (a long backlog is extracted window by window)."""
    thread.last_run_at = now
    thread.extraction_due_at = now if more and thread.pending_messages else None
    thread.updated_at = now
    thread.save(
        update_fields=[
            "extracted_seq",
            "memories_added",
            "memories_updated",
            "last_run_at",
            "extraction_due_at",
            "updated_at",
        ]
    )
    run.state, run.counts, run.finished_at = RunState.DONE, counts, timezone.now()
    run.error_message = note
    with transaction.atomic():
        run.save(update_fields=["state", "counts", "finished_at", "error_message"])
        extraction_event_write(run, subject_id=thread.subject_id, now=run.finished_at)
    _measure(run)
    if thread.extraction_due_at is not None:
        transaction.on_commit(partial(_continue, thread.pk))


def _continue(thread_pk: int) -> None:
    thread = Thread.objects.filter(pk=thread_pk).first()
    if thread is not None and thread.extraction_due_at is not None:
        with transaction.atomic():
            run_request(thread=thread, trigger="schedule")


def _fail(run: ExtractionRun, error_class: str, message: str, *, usage=None, latency_ms=0) -> None:
    run.state, run.finished_at = RunState.FAILED, timezone.now()
    run.error_class, run.error_message = error_class[:200], message[:2000]
    if usage is not None:
        run.prompt_tokens += usage.prompt_tokens
        run.completion_tokens += usage.completion_tokens
    run.llm_ms += latency_ms or 0
    with transaction.atomic():
        run.save(
            update_fields=[
                "state",
                "finished_at",
                "error_class",
                "error_message",
                "prompt_tokens",
                "completion_tokens",
                "llm_ms",
            ]
        )
        extraction_event_write(run, subject_id=run.thread.subject_id, now=run.finished_at)
    _measure(run)


def _measure(run: ExtractionRun) -> None:
    """A finished run in the metrics: its state and the tokens it used."""
    metrics.count(metrics.EXTRACTION_RUNS, run.state)
    metrics.count(metrics.EXTRACTION_TOKENS, "prompt", amount=run.prompt_tokens)
    metrics.count(metrics.EXTRACTION_TOKENS, "completion", amount=run.completion_tokens)


def tokens_used_today(tenant_id: int, now: datetime) -> int:
    start = now.replace(hour=0, minute=0, second=0, microsecond=0)
    totals = (
        ExtractionRun.objects.for_tenant(tenant_id)
        .filter(created_at__gte=start)
        .aggregate(p=Sum("prompt_tokens"), c=Sum("completion_tokens"))
    )
    return (totals["p"] or 0) + (totals["c"] or 0)


def _budget_spent(run: ExtractionRun, now: datetime) -> bool:
    budget = run.tenant.extraction_daily_token_budget
    return bool(budget) and tokens_used_today(run.tenant_id, now) >= budget


def _defer(run: ExtractionRun, thread: Thread, now: datetime) -> None:
    """Over budget: the run waits `deferred`; the thread is due again when the day turns."""
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    run.state, run.finished_at = RunState.DEFERRED, timezone.now()
    run.error_message = "The tenant's daily extraction token budget is spent"
    run.save(update_fields=["state", "finished_at", "error_message"])
    Thread.objects.filter(pk=thread.pk).update(extraction_due_at=tomorrow)


def _summarise_if_due(
    run: ExtractionRun, thread: Thread, *, llm: LLMClient | None, now: datetime
) -> None:
    """Fold extracted messages into the rolling summary once they exceed the threshold."""
    if unsummarised_bytes(thread) <= thread.agent.summary_threshold_bytes:
        return
    messages = unsummarised(thread)
    try:
        answer = (llm or get_llm()).summarize(summary=thread.summary, messages=messages)
    except LLMError as exc:  # the next run tries again; the extraction itself stands
        log.warning("summary of thread %s failed: %s", thread.pk, exc.error_class)
        return
    Thread.objects.filter(pk=thread.pk).update(
        summary=answer.summary, summarized_seq=messages[-1].seq, updated_at=now
    )
    thread.summary, thread.summarized_seq = answer.summary, messages[-1].seq
    ExtractionRun.objects.filter(pk=run.pk).update(
        prompt_tokens=run.prompt_tokens + answer.usage.prompt_tokens,
        completion_tokens=run.completion_tokens + answer.usage.completion_tokens,
        llm_ms=run.llm_ms + answer.latency_ms,
    )
    run.prompt_tokens += answer.usage.prompt_tokens
    run.completion_tokens += answer.usage.completion_tokens
    run.llm_ms += answer.latency_ms

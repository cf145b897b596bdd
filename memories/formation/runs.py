"""Extraction runs (docs/formation.md): when a thread is extracted, and the life of one run.

A run is requested (`run_request`) by the sleep-time schedule (`extract_due_threads`, idle
threads picked with SKIP LOCKED), by `extract: "now"`, by `/extract`, by `/end` and by the
console; a thread has at most one open (queued or running) run, so two triggers at once give
one run. `run_execute` then:

1. claims the run (queued → running) and holds its liveness while it works
   (`run_liveness`), so a run whose worker died can be told from a live one and taken over;
2. defers it when the tenant's daily token budget is spent;
3. asks the model once: the validated answer (at most the agent's `extraction_max_operations`
   operations, the rest counted `over_limit`), with the ids of the memories the prompt offered
   as changeable, is committed on the run *before* anything is applied, so a retry after a
   crash applies that answer instead of asking (and paying) again;
4. applies the operations in bounded batches (`apply.apply_operations`), each committed with
   the run's progress, so a retry resumes after the last batch and applies each operation
   once; then moves the thread's watermark and marks the run `done` in one transaction;
5. folds old messages into the rolling summary once they exceed the agent's threshold.

Model failures (after the client's own retries) and malformed answers fail the run with the
error recorded (through secret redaction); nothing is applied and the watermark stays, so the
messages wait for the next trigger. A run is never replayed forever: one whose worker stopped
`MAX_RUN_ATTEMPTS` times (killed, or past the cluster's task time limit) fails, and applying
stops with the run failed before the task's time limit is reached. A run that an erasure failed
or deleted while it worked (waiting for the model, between batches) ends quietly: that is an
expected outcome, not an error.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime, timedelta
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Sum
from django.utils import timezone
from django_q.tasks import async_task

from accounts.models import Agent, Extraction
from memories import validation
from memories.clock import resolve_now
from memories.events.record import extraction_event_write
from memories.formation.apply import (
    CONTEXT_FROM_SEQ,
    ApplyDeadline,
    apply_operations,
    user_scope_allowed,
)
from memories.formation.llm import LLMClient, LLMError, get_llm, llm_configured
from memories.formation.operations import Operation, operation_json, parse_operations
from memories.formation.prompt_context import (
    earlier_messages,
    message_window,
    prompt_kinds,
    related_memories,
    unsummarised,
    unsummarised_bytes,
)
from memories.models import OPEN_RUN_STATES, ExtractionRun, RunState, Thread
from memories.redaction import redact
from memories.run_liveness import Liveness
from memories.secrets_scan import find_secret
from memoryhub import metrics
from memoryhub.errors import InvalidInput

log = logging.getLogger(__name__)

_LIVENESS = Liveness(0x4D48_5852)  # "MHXR": held by each running run
DUE_BATCH = 50
# Claims of one run at most: a run whose worker stopped this often fails instead of replaying.
MAX_RUN_ATTEMPTS = 3
# Applying stops (the run fails) once this share of the cluster's task time limit is spent.
DEADLINE_SHARE = 0.9
ABANDONED = (
    "ExtractionAbandoned",
    f"The run's worker stopped {MAX_RUN_ATTEMPTS} times before it finished (killed, or past "
    "the task time limit): given up",
)


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


def _requeue_abandoned() -> int:
    """Runs left `running` by a worker that died go back to `queued` and to the cluster, unless
    they were claimed `MAX_RUN_ATTEMPTS` times already: those fail."""
    requeued = 0
    for run_id in ExtractionRun.objects.filter(state=RunState.RUNNING).values_list("pk", flat=True):
        if not _LIVENESS.try_hold(run_id):
            continue  # a live worker holds it
        try:
            running = ExtractionRun.objects.filter(pk=run_id, state=RunState.RUNNING)
            if _give_up(running):
                continue
            if running.update(state=RunState.QUEUED):
                transaction.on_commit(partial(enqueue_run, run_id))
                requeued += 1
        finally:
            _LIVENESS.release(run_id)
    return requeued


def _give_up(runs) -> int:
    """Fail those of `runs` (open ones) that were claimed `MAX_RUN_ATTEMPTS` times already."""
    return runs.filter(attempts__gte=MAX_RUN_ATTEMPTS).update(
        state=RunState.FAILED,
        error_class=ABANDONED[0],
        error_message=ABANDONED[1],
        finished_at=timezone.now(),
    )


def _claim(run_id: int, now: datetime) -> ExtractionRun | None:
    """Take the run: a queued one, or a running one whose worker is gone. None: not ours (or
    given up: claimed `MAX_RUN_ATTEMPTS` times already)."""
    if not _LIVENESS.try_hold(run_id):
        return None  # a live worker is on it
    open_run = ExtractionRun.objects.filter(pk=run_id, state__in=OPEN_RUN_STATES)
    claimed = not _give_up(open_run) and open_run.update(
        state=RunState.RUNNING, started_at=now, attempts=F("attempts") + 1
    )
    if not claimed:
        _LIVENESS.release(run_id)
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
        with _LIVENESS.kept(run.pk):
            _execute(run, llm=llm, now=now, deadline=_deadline(started))
    except LLMError as exc:
        _fail(run, type(exc).__name__, str(exc), usage=exc.usage, latency_ms=exc.latency_ms)
    except ApplyDeadline as exc:
        _fail(run, "ExtractionTimeout", str(exc))
    except Exception as exc:  # noqa: BLE001 - recorded on the run, shown in the console
        log.exception("extraction run %s failed", run.pk)  # logs are redacted (LOGGING)
        _fail(run, type(exc).__name__, str(exc))
    finally:
        spent = int((time.monotonic() - started) * 1000)
        run.server_ms += max(spent - (run.llm_ms - llm_ms_before), 0)
        ExtractionRun.objects.filter(pk=run.pk).update(server_ms=run.server_ms)
        _LIVENESS.release(run.pk)
    return run


def _deadline(started: float) -> float | None:
    """When applying must stop: before the cluster kills the task (`Q_CLUSTER["timeout"]`)."""
    timeout = settings.Q_CLUSTER.get("timeout")
    return None if timeout is None else started + timeout * DEADLINE_SHARE  # type: ignore[operator]


def _execute(
    run: ExtractionRun, *, llm: LLMClient | None, now: datetime, deadline: float | None
) -> None:
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
        memories = related_memories(thread=thread, messages=messages, now=now)
        earlier = earlier_messages(thread, before_seq=messages[0].seq)
        answer = llm.extract(
            summary=thread.summary,
            messages=messages,
            memories=memories,
            earlier=earlier,
            kinds=prompt_kinds(run.tenant),
            user_scope=user_scope_allowed(thread),
        )
        if not _keep_answer(run, answer, messages, memories, earlier):
            log.info("extraction run %s ended while the model answered (erased)", run.pk)
            return
    # The answer is kept by now (above, or by an earlier attempt at the run).
    operations = parse_operations_json(run.answer)  # type: ignore[arg-type]
    outcome = apply_operations(
        run=run, thread=thread, operations=operations, now=now, deadline=deadline
    )
    if outcome is None:
        log.info("extraction run %s ended while it was applied (erased, or done)", run.pk)
        return
    with transaction.atomic():
        locked = ExtractionRun.objects.select_for_update().filter(pk=run.pk).first()
        if locked is None or locked.state != RunState.RUNNING:
            return  # erased, or finished by another worker meanwhile
        thread = Thread.objects.select_for_update().get(pk=thread.pk)
        thread.agent, thread.tenant = agent, run.tenant
        counts = outcome.as_dict()
        for name in ANSWER_COUNTS:  # dropped before the answer was kept
            counts[name] += run.answer.get(name, 0)  # type: ignore[union-attr]
        thread.extracted_seq = max(thread.extracted_seq, run.to_seq)
        thread.memories_added += outcome.added
        thread.memories_updated += outcome.updated
        _finish(run, thread, counts=counts, now=now)
    _summarise_if_due(run, thread, llm=llm, now=now)


def _keep_answer(run: ExtractionRun, answer, messages, memories, earlier) -> bool:
    """Commit the answer on the run with what the prompt offered (the changeable memories, and
    the first earlier message shown: evidence may cite it and those after it), if the run is
    still running (an erasure may have failed or deleted it meanwhile: the answer, about an
    erased subject, is then not kept). The tokens are recorded either way, where the run still
    exists."""
    run.answer = _storable(answer.operations, run.agent)
    run.answer[CONTEXT_FROM_SEQ] = earlier[0].seq if earlier else messages[0].seq
    run.offered_ids = [m.memory_id for m in memories if not m.read_only]
    run.from_seq, run.to_seq = messages[0].seq, messages[-1].seq
    run.model, run.prompt_version = answer.model, answer.prompt_version
    run.prompt_tokens += answer.usage.prompt_tokens
    run.completion_tokens += answer.usage.completion_tokens
    run.llm_ms += answer.latency_ms
    spent = {
        "model": run.model,
        "prompt_version": run.prompt_version,
        "prompt_tokens": run.prompt_tokens,
        "completion_tokens": run.completion_tokens,
        "llm_ms": run.llm_ms,
    }
    kept = ExtractionRun.objects.filter(pk=run.pk, state=RunState.RUNNING).update(
        answer=run.answer,
        offered_ids=run.offered_ids,
        from_seq=run.from_seq,
        to_seq=run.to_seq,
        **spent,
    )
    if not kept:
        ExtractionRun.objects.filter(pk=run.pk).update(**spent)
    return bool(kept)


# What the kept answer counts of its own: operations dropped before it was kept.
ANSWER_COUNTS = ("secret_dropped", "over_limit", "invalid")


def _storable(operations: list[Operation], agent: Agent) -> dict:
    """The answer as kept on the run: the first `agent.extraction_max_operations` operations
    (the rest counted `over_limit`); of those, one holding anything secret-shaped is dropped
    (counted `secret_dropped`), so no secret is stored, even in the run's record, and one
    holding what PostgreSQL cannot store (NUL, a lone surrogate) is dropped as `invalid`, so the
    rest still apply."""
    limit = agent.extraction_max_operations
    kept, dropped, invalid = [], 0, 0
    for operation in operations[:limit]:
        raw = operation_json(operation)
        try:
            validation.reject_nul(raw, "operation")
        except InvalidInput:
            invalid += 1
            continue
        if find_secret(raw, "operation") is None:
            kept.append(raw)
        else:
            dropped += 1
    return {
        "operations": kept,
        "secret_dropped": dropped,
        "over_limit": max(len(operations) - limit, 0),
        "invalid": invalid,
    }


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
    (a long backlog is extracted window by window). Rows an erasure deleted meanwhile are left
    alone."""
    thread.last_run_at = now
    thread.extraction_due_at = now if more and thread.pending_messages else None
    thread.updated_at = now
    Thread.objects.filter(pk=thread.pk).update(
        extracted_seq=thread.extracted_seq,
        memories_added=thread.memories_added,
        memories_updated=thread.memories_updated,
        last_run_at=now,
        extraction_due_at=thread.extraction_due_at,
        updated_at=now,
    )
    run.state, run.counts, run.finished_at = RunState.DONE, counts, timezone.now()
    run.error_message = note
    with transaction.atomic():
        updated = ExtractionRun.objects.filter(pk=run.pk).update(
            state=run.state, counts=counts, finished_at=run.finished_at, error_message=note
        )
        if updated:  # an erasure may have deleted it meanwhile
            extraction_event_write(run, subject_id=thread.subject_id, now=run.finished_at)
    if updated:
        _measure(run)
    if thread.extraction_due_at is not None:
        transaction.on_commit(partial(_continue, thread.pk))


def _continue(thread_pk: int) -> None:
    thread = Thread.objects.filter(pk=thread_pk).first()
    if thread is not None and thread.extraction_due_at is not None:
        with transaction.atomic():
            run_request(thread=thread, trigger="schedule")


def _fail(run: ExtractionRun, error_class: str, message: str, *, usage=None, latency_ms=0) -> None:
    """Fail the run, if it is still running (an erasure may have failed or deleted it), with
    its error through secret redaction: the message may quote a model's answer or a server's
    error body."""
    run.state, run.finished_at = RunState.FAILED, timezone.now()
    run.error_class = redact(error_class[:200])[0]
    run.error_message = redact(message[:2000])[0]
    if usage is not None:
        run.prompt_tokens += usage.prompt_tokens
        run.completion_tokens += usage.completion_tokens
    run.llm_ms += latency_ms or 0
    with transaction.atomic():
        updated = ExtractionRun.objects.filter(pk=run.pk, state=RunState.RUNNING).update(
            state=run.state,
            finished_at=run.finished_at,
            error_class=run.error_class,
            error_message=run.error_message,
            prompt_tokens=run.prompt_tokens,
            completion_tokens=run.completion_tokens,
            llm_ms=run.llm_ms,
        )
        if updated:  # still running: an erasure had not failed or deleted it
            extraction_event_write(run, subject_id=run.thread.subject_id, now=run.finished_at)
    if updated:
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
    ExtractionRun.objects.filter(pk=run.pk, state=RunState.RUNNING).update(
        state=run.state, finished_at=run.finished_at, error_message=run.error_message
    )
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

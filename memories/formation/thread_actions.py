"""What an agent (and the console) does with a thread once its messages are in: read
its extraction state, ask for an extraction now, and end it with a last extraction.

REST (`GET /threads/{id}`, `POST /threads/{id}/extract`, `POST /threads/{id}/end`), MCP and
the console call these; none of them decides a state of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from accounts.models import Extraction
from accounts.principal import Principal
from memories import validation
from memories.clock import resolve_now
from memories.formation.ingest import DISABLED_REASON, thread_find, thread_get
from memories.formation.llm import llm_configured
from memories.formation.runs import run_request
from memories.models import OPEN_RUN_STATES, ExtractionRun, RunState, Thread
from memories.secrets_scan import scan_secrets
from memories.serialization import iso
from memories.services.lifecycle import conversation_end
from memoryhub.errors import InvalidInput

OFF_REASON = "Extraction is off for this agent"
NOTHING_PENDING = "No messages wait for extraction"


@dataclass(frozen=True)
class ThreadStatus:
    thread: Thread
    extraction: dict[str, Any]


def latest_run(thread: Thread) -> ExtractionRun | None:
    return (
        ExtractionRun.objects.for_tenant(thread.tenant_id)
        .filter(thread=thread)
        .order_by("-created_at", "-id")
        .first()
    )


def extraction_state(thread: Thread) -> str:
    """Where the thread's extraction stands, one word (docs/formation.md, "Extraction states"):

    `queued` / `running` — a run is open; `disabled` — no LLM is configured; `off` — the
    agent's extraction is off; `deferred` — the tenant's daily token budget is spent, due again
    tomorrow; `scheduled` — messages wait and are due at `due_at`; `done` — the latest run
    finished and nothing waits; `failed` — the latest run failed and its messages still wait
    (the next message or `/extract` tries again); `idle` — nothing is open or scheduled (no
    messages yet, or messages sent with `extract: "off"`: `pending_messages` tells).
    """
    latest = latest_run(thread)
    if latest is not None and latest.state in OPEN_RUN_STATES:
        return latest.state
    if not llm_configured():
        return "disabled"
    if thread.agent.extraction == Extraction.OFF:
        return "off"
    if thread.extraction_due_at is not None:
        deferred = latest is not None and latest.state == RunState.DEFERRED
        return RunState.DEFERRED if deferred else "scheduled"
    if thread.pending_messages == 0:
        return latest.state if latest is not None else "idle"
    if latest is not None and latest.state == RunState.FAILED:
        return RunState.FAILED
    return "idle"


def thread_status(
    *, principal: Principal, thread_id: str, subject_id: str | None = None
) -> ThreadStatus:
    """The thread (read scope; NOT_FOUND as `thread_get`) and its `extraction` object."""
    thread = thread_get(principal=principal, thread_id=thread_id, subject_id=subject_id)
    extraction = {
        "state": str(extraction_state(thread)),
        "due_at": iso(thread.extraction_due_at),
        "last_run_at": iso(thread.last_run_at),
        "pending_messages": thread.pending_messages,
        "memories_added": thread.memories_added,
        "memories_updated": thread.memories_updated,
    }
    return ThreadStatus(thread=thread, extraction=extraction)


def thread_extract(
    *,
    principal: Principal,
    thread_id: str,
    subject_id: str | None = None,
    now: datetime | None = None,
    trigger: str = "extract",
) -> dict[str, Any]:
    """Queue an extraction of the thread's pending messages now (write scope).

    Returns the `extraction` object: `{"state": "queued" | "running", "run_id"}` (an open run
    of the thread is returned rather than a second one), or `{"state": "disabled" | "off" |
    "idle", "reason"}` when nothing was queued.
    """
    principal.require_scope("write")
    now = resolve_now(now)
    with transaction.atomic():
        found = thread_find(principal=principal, thread_id=thread_id, subject_id=subject_id)
        thread = Thread.objects.select_for_update().get(pk=found.pk)
        if not llm_configured():
            return {"state": "disabled", "reason": DISABLED_REASON}
        if principal.agent.extraction == Extraction.OFF:
            return {"state": "off", "reason": OFF_REASON}
        if thread.pending_messages == 0:
            open_run = latest_run(thread)
            if open_run is None or open_run.state not in OPEN_RUN_STATES:
                return {"state": "idle", "reason": NOTHING_PENDING}
        run = run_request(thread=thread, trigger=trigger, now=now)
        return {"state": str(run.state), "run_id": run.pk}


def threads_close(
    *, principal: Principal, thread_id: str, subject_id: str | None, now: datetime
) -> int:
    """The thread part of ending a run (`thread_end`, in its transaction):
    each matching thread gets a last extraction of its pending messages (when an LLM is
    configured and the agent's extraction is not off) and its `ended_at` (kept from a first
    end). `subject_id` None: the agent's threads of that id for every subject. Returns how many
    runs were requested."""
    threads = Thread.objects.for_tenant(principal.tenant).filter(
        agent=principal.agent, thread_id=thread_id
    )
    if subject_id is not None:
        threads = threads.filter(subject_id=subject_id)
    extract = llm_configured() and principal.agent.extraction != Extraction.OFF
    requested = 0
    for thread in threads.order_by("id").select_for_update():
        if extract and thread.pending_messages:
            run_request(thread=thread, trigger="end", now=now)
            requested += 1
        if thread.ended_at is None:
            thread.ended_at, thread.updated_at = now, now
            thread.save(update_fields=["ended_at", "updated_at"])
    return requested


def thread_end(
    *,
    principal: Principal,
    thread_id: str | None,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> int:
    """End a run: its stored thread gets a last extraction of its pending
    messages, queued first, and `ended_at` (from which message retention counts); its
    `conversation` memories are marked expired (`lifecycle.conversation_end`), all in one
    transaction.

    A subject (`subject_id`, or the key's bound one) narrows it to that subject's thread and its
    subject's (and subject-less) memories; without one every subject's are ended. Returns how
    many memories were removed.
    """
    principal.require_scope("write")
    now = resolve_now(now)
    scan_secrets({"thread_id": thread_id})
    thread_id = validation.identifier(thread_id, "thread_id")
    if thread_id is None:
        raise InvalidInput("'thread_id' is required", field="thread_id")
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    with transaction.atomic():
        threads_close(principal=principal, thread_id=thread_id, subject_id=subject, now=now)
        return conversation_end(
            principal=principal, thread_id=thread_id, subject_id=subject, now=now
        )

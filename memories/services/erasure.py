"""Subject erasure (`DELETE /api/v1/subjects/{subject_id}`): everything the key's
tenant holds about one end user, across all of its agents.

- `purge=True` (the right to erasure): every memory of the subject is purged exactly as
  `memory_forget(purge=True)` purges one (`lifecycle.purge_content`: text, data, embedding gone,
  also from its revisions and stored responses; ids, hashes and timestamps stay), so is the
  history of its memories that retention deleted already, and its threads are deleted with
  their messages and extraction runs.
- `purge=False`: its live memories are tombstoned (restorable by an operator) and its messages
  deleted; the threads stay, emptied (no messages, no summary, nothing pending).

Both need the `admin` scope: either one removes data of every agent of the tenant, not only
the caller's. A key bound to a subject may erase only that subject.

The threads go first: a thread is locked and emptied in bounded batches, and an extraction run
still working on one finds its run deleted or failed and applies nothing, so no memory of the
subject is formed from its conversations after its memories were erased. Memories then go in bounded batches, one
transaction each; running the erasure again finishes what an interrupted one left and counts
only what it changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import cast

from django.db import transaction
from django.db.models import F

from accounts.models import Tenant
from accounts.principal import Principal
from memories import validation
from memories.clock import resolve_now
from memories.events.record import event_write
from memories.models import (
    OPEN_RUN_STATES,
    Category,
    ExtractionRun,
    Memory,
    Message,
    RunState,
    Status,
    Thread,
)
from memories.secrets_scan import scan_secrets
from memories.services.lifecycle import erase_orphaned_revisions, purge_content, tombstone
from memoryhub.errors import InvalidInput, NotFound

BATCH_SIZE = 500
REASON = "subject erasure"


@dataclass(frozen=True)
class ErasureResult:
    subject_id: str
    memories: int  # purged, or tombstoned
    threads: int  # deleted, or emptied
    messages: int  # deleted
    purged: bool


def subject_erase(
    *,
    principal: Principal,
    subject_id: str,
    purge: bool = False,
    now: datetime | None = None,
    batch_size: int = BATCH_SIZE,
) -> ErasureResult:
    """Erase one subject's memories, threads and messages in the key's tenant (admin scope)."""
    principal.require_scope("admin")
    # A key's subject or the one named, never None: `_subject` refuses an empty id.
    subject = cast(str, principal.resolve_subject(_subject(subject_id)))
    return _erase(principal.tenant, subject, purge, principal.actor, resolve_now(now), batch_size)


def subject_erase_by_operator(
    *,
    tenant: Tenant,
    subject_id: str,
    actor: str,
    purge: bool = False,
    now: datetime | None = None,
    batch_size: int = BATCH_SIZE,
) -> ErasureResult:
    """The same erasure from the console: an operator (admin) of `tenant`, `actor`
    `operator:<email>` on the revisions."""
    return _erase(tenant, _subject(subject_id), purge, actor, resolve_now(now), batch_size)


def _subject(subject_id: str) -> str:
    # No subject is ever stored under a secret-shaped id (every write scans it); refusing one
    # here keeps it out of the answer, which would echo it.
    scan_secrets({"subject_id": subject_id})
    subject = validation.identifier(subject_id, "subject_id")
    if subject is None:
        raise InvalidInput("'subject_id' is required", field="subject_id")
    return subject


def _erase(
    tenant: Tenant, subject: str, purge: bool, actor: str, now: datetime, batch_size: int
) -> ErasureResult:
    thread_ids = list(
        Thread.objects.for_tenant(tenant)
        .filter(subject_id=subject)
        .order_by("id")
        .values_list("pk", flat=True)
    )
    messages = threads = 0
    for thread_pk in thread_ids:
        deleted, touched = _erase_thread(tenant.pk, thread_pk, purge, now, batch_size)
        messages += deleted
        threads += touched
    # One scan for the subject's memories (every status, every agent), then batches by id.
    targets = Memory.objects.for_tenant(tenant).filter(subject_id=subject)
    targets = (
        targets.filter(purged_at__isnull=True) if purge else targets.filter(status=Status.ACTIVE)
    )
    memory_ids = list(targets.order_by("pk").values_list("pk", flat=True))
    memories = 0
    for start in range(0, len(memory_ids), batch_size):
        memories += _erase_memories(
            tenant.pk, memory_ids[start : start + batch_size], purge, actor, now
        )
    if purge:
        erase_orphaned_revisions(tenant_id=tenant.pk, subject_id=subject)
    # The tenant's event (no agent: every agent acting for the subject sees it), written once
    # the erasure is complete; each memory's own events came with its batch.
    event_write(
        tenant_id=tenant.pk,
        type="subject.erased",
        occurred_at=now,
        category=Category.WORKSPACE,
        subject_id=subject,
        data={
            "subject_id": subject,
            "purged": purge,
            "memories": memories,
            "threads": threads,
            "messages": messages,
        },
    )
    return ErasureResult(
        subject_id=subject, memories=memories, threads=threads, messages=messages, purged=purge
    )


def _erase_thread(
    tenant_id: int, thread_pk: int, purge: bool, now: datetime, batch_size: int
) -> tuple[int, int]:
    """Delete a thread's messages, `batch_size` per transaction, then the thread itself with its
    runs (purge), or its summary and pending state. An open run is failed: a worker still
    asking the model finds it no longer `running` and applies nothing. Returns (messages
    deleted, 1 if the thread was there)."""
    deleted = 0
    while True:
        with transaction.atomic():
            # A run's apply locks the run, then its thread: the same order here.
            runs = ExtractionRun.objects.for_tenant(tenant_id).filter(thread_id=thread_pk)
            list(runs.select_for_update())
            thread = (
                Thread.objects.for_tenant(tenant_id)
                .filter(pk=thread_pk)
                .select_for_update()
                .first()
            )
            if thread is None:
                return deleted, 0
            batch = list(
                Message.objects.for_tenant(tenant_id)
                .filter(thread=thread)
                .order_by("seq")
                .values_list("pk", flat=True)[:batch_size]
            )
            if batch:
                gone, _ = Message.objects.filter(pk__in=batch).delete()
                deleted += gone
                Thread.objects.filter(pk=thread.pk).update(message_count=F("message_count") - gone)
            if len(batch) == batch_size:
                continue  # more to come, in the next transaction
            if purge:
                runs.delete()
                thread.delete()
                return deleted, 1
            runs.filter(state__in=OPEN_RUN_STATES).update(
                state=RunState.FAILED,
                error_class="SubjectErased",
                error_message="The subject was erased: its messages are gone",
                finished_at=now,
            )
            # Nothing is left to extract or summarise: the watermarks move to the end.
            Thread.objects.filter(pk=thread.pk).update(
                message_count=0,
                summary="",
                summarized_seq=F("last_seq"),
                extracted_seq=F("last_seq"),
                extraction_due_at=None,
                updated_at=now,
            )
            return deleted, 1


def _erase_memories(tenant_id: int, ids: list[str], purge: bool, actor: str, now: datetime) -> int:
    changed = 0
    with transaction.atomic():
        rows = (
            Memory.objects.for_tenant(tenant_id)
            .select_related("agent", "tenant")
            .filter(pk__in=ids)
            .order_by("pk")
        )
        for memory in rows:
            try:
                if purge and memory.purged_at is None:
                    purge_content(memory, actor=actor, reason=REASON, now=now)
                    changed += 1
                elif not purge and memory.status == Status.ACTIVE:
                    tombstone(memory, actor=actor, reason=REASON, now=now)
                    changed += 1
            except NotFound:  # deleted meanwhile (retention): nothing left to erase
                continue
    return changed

"""How a memory leaves `active`: an agent forgets it (tombstone, or purge: the right to
erasure) or ends its thread (`conversation_end`, the memory part of
`formation.thread_actions.thread_end`); and the tombstone, purge and expiry steps the store and the
console's actions share.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Case, Q, Value, When

from accounts.principal import Principal
from memories import idempotency, validation
from memories.cas import Cas
from memories.clock import resolve_now
from memories.events.record import erase_memory_events, events_insert, in_review, memory_event
from memories.ids import is_memory_id
from memories.models import Category, ChangeType, Memory, Status
from memories.revisions import revision_write, snapshot
from memories.services.changes import writable
from memories.services.sequences import lock_rows
from memories.services.write_support import MAX_RETRIES, clean_reason
from memories.services.writes import (
    change,
    conditional_update,
    reload_active,
    reload_any,
    status_change,
)
from memories.visibility import owned_q
from memoryhub.errors import Conflict, InvalidInput, NotFound

# What a purge erases from the memory row and from every before/after of its revisions.
PURGED_FIELDS: dict[str, Any] = {"text": "", "data": None, "key": None, "tags": [], "mentions": []}


def memory_forget(
    *,
    principal: Principal,
    memory_id: str | None = None,
    key: str | None = None,
    subject_id: str | None = None,
    reason: str = "",
    purge: bool = False,
    now: datetime | None = None,
    expected_version: int | None = None,
) -> tuple[bool, str | None]:
    """Forget by id or key: tombstone (kept for `previously_corrected`), or with `purge`
    (admin scope) erase text, data and embedding from the memory and its revisions.
    With `expected_version` the tombstone is compare-and-set (CONFLICT if it moved on).

    Returns (deleted, memory_id): by id, an unknown or invisible id is 404 and one already
    forgotten answers (False, id); by key, no such key answers (False, None).
    """
    principal.require_scope("admin" if purge else "write")
    now = resolve_now(now)
    reason = clean_reason(reason)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    owned = Memory.objects.for_tenant(principal.tenant).filter(
        owned_q(agent=principal.agent, subject_id=subject)
    )
    if memory_id is not None:
        memory = owned.filter(pk=memory_id).first() if is_memory_id(memory_id) else None
        if memory is None:
            writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
            raise NotFound()  # defensive: writable raised already
        targets = [memory]
    else:
        key = validation.memory_key(key)
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

    if purge and any(t.subject_id != principal.bound_subject for t in targets):
        # A workspace or subject-less memory is no one subject's: only a tenant-wide key purges it.
        principal.require_tenant_wide("admin")
    deleted = False
    with transaction.atomic():
        for target in targets:
            if purge:
                if target.purged_at is None:
                    purge_content(target, actor=principal.actor, reason=reason, now=now)
                    deleted = True
            elif _is_live(target, now):
                cas = None if expected_version is None else Cas(version=expected_version)
                tombstone(target, actor=principal.actor, reason=reason, now=now, cas=cas)
                deleted = True
    return deleted, memory.pk


def _is_live(memory: Memory, now: datetime) -> bool:
    return memory.status == Status.ACTIVE and (memory.expires_at is None or memory.expires_at > now)


def conversation_end(
    *, principal: Principal, thread_id: str, subject_id: str | None, now: datetime
) -> int:
    """The memory part of ending a run (`formation.thread_actions.thread_end`, in its transaction):
    the agent's `conversation` memories of `thread_id` are marked expired (one revision each).

    A subject narrows it to that subject's (and subject-less) memories; None ends every
    subject's. `thread_id` and `subject_id` are validated by the caller. Returns how many
    memories were removed.
    """
    rows = (
        Memory.objects.for_tenant(principal.tenant)
        .filter(agent=principal.agent, category=Category.CONVERSATION, thread_id=thread_id)
        .filter(status=Status.ACTIVE)
    )
    if subject_id is not None:
        rows = rows.filter(Q(subject_id__isnull=True) | Q(subject_id=subject_id))
    removed = 0
    with transaction.atomic():
        for memory in lock_rows(rows.order_by("id")):
            removed += status_change(
                memory,
                status=Status.EXPIRED,
                actor=principal.actor,
                change_type=ChangeType.EXPIRE,
                reason="thread ended",
                now=now,
            )
    return removed


def tombstone(
    memory: Memory,
    *,
    actor: str,
    reason: str,
    now: datetime,
    change_type: str = ChangeType.TOMBSTONE,
    cas: Cas | None = None,
) -> Memory:
    """Forget: status `tombstoned` with who, when and why (the content stays, for
    `previously_corrected` and a restore)."""
    return change(
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
        cas=cas,
        reload=lambda: reload_any(memory),
    )


def expire(memory: Memory, *, actor: str, reason: str, now: datetime) -> Memory:
    """Status `expired` (an active memory only)."""
    return change(
        memory,
        fields={"status": Status.EXPIRED, "status_changed_at": now},
        actor=actor,
        change_type=ChangeType.EXPIRE,
        reason=reason,
        now=now,
        reload=lambda: reload_active(memory),
    )


def purge_content(memory: Memory, *, actor: str, reason: str, now: datetime) -> Memory:
    """Erase the content for good: the row keeps ids, hashes and timestamps only; so do its
    revisions and stored idempotent responses."""
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
            was_in_review = in_review(
                {"status": memory.status, "review_state": memory.review_state}
            )
            with transaction.atomic():
                if conditional_update(
                    memory, fields=fields, now=now, expected_version=memory.version
                ):
                    break
                transaction.set_rollback(True)  # a lost UPDATE's row lock: see writes.change
            reloaded = reload_any(memory)
            if reloaded is None:
                raise NotFound()
            memory = reloaded
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
        if was_in_review:  # the revision's events cannot tell: a purge records no `before`
            events_insert([memory_event(memory, "review.resolved", now=now)])
    return memory


# Erases PURGED_FIELDS from the before/after snapshots of the revisions a WHERE picks; its two
# parameters are the patch (json.dumps(PURGED_FIELDS)).
_ERASE_REVISIONS = """
UPDATE memories_memoryrevision r SET
  before = CASE WHEN jsonb_typeof(r.before) = 'object' THEN r.before || %s::jsonb ELSE r.before END,
  after = CASE WHEN jsonb_typeof(r.after) = 'object' THEN r.after || %s::jsonb ELSE r.after END
"""


def _erase_revisions(memory: Memory) -> None:
    """Erase the content from the memory's revisions and its events."""
    patch = json.dumps(PURGED_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(
            _ERASE_REVISIONS + "WHERE r.tenant_id = %s AND r.memory_id = %s",
            [patch, patch, memory.tenant_id, memory.pk],
        )
    erase_memory_events(tenant_id=memory.tenant_id, patch=patch, memory_id=memory.pk)


def erase_orphaned_revisions(*, tenant_id: int, subject_id: str) -> int:
    """Purge's erasure for the history of a subject's memories that retention has deleted
    already (their revisions outlive them, content included). Returns the revisions changed."""
    patch = json.dumps(PURGED_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(
            _ERASE_REVISIONS
            + """
            WHERE r.tenant_id = %s
              AND (r.before ->> 'subject_id' = %s OR r.after ->> 'subject_id' = %s)
              AND NOT EXISTS (SELECT 1 FROM memories_memory m WHERE m.id = r.memory_id)
            """,
            [patch, patch, tenant_id, subject_id, subject_id],
        )
        erased: int = cursor.rowcount
    erase_memory_events(tenant_id=tenant_id, patch=patch, subject_id=subject_id)
    return erased

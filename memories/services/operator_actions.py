"""The console's actions: an operator of the tenant corrects, tombstones, restores, purges,
approves, merges and tags any memory of that tenant (`actor` = "operator:<email>")."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from django.db import IntegrityError, transaction

from accounts.models import Tenant
from memories import inputs, kind_registry, validation
from memories.cas import Cas
from memories.clock import resolve_now
from memories.ids import is_memory_id
from memories.models import ChangeType, Memory, ReviewState, Scope, Status
from memories.secrets_scan import scan_secrets
from memories.services.changes import single_conflict
from memories.services.eviction import cap_lock, evict_over_cap
from memories.services.lifecycle import purge_content, tombstone
from memories.services.write_support import clean_reason
from memories.services.writes import change, change_guard, reload_any, update_fields
from memoryhub.errors import Conflict, InvalidInput, NotFound

CORRECTABLE_FIELDS = inputs.UPDATE_FIELDS | {"key"}


def _operator_get(tenant: Tenant, memory_id: str) -> Memory:
    memory = (
        Memory.objects.for_tenant(tenant).select_related("agent").filter(pk=memory_id).first()
        if is_memory_id(memory_id)
        else None
    )
    if memory is None:
        raise NotFound()
    memory.tenant = tenant  # the policies its expiry is computed from
    return memory


def _not_purged(memory: Memory) -> None:
    if memory.purged_at is not None:
        raise InvalidInput("This memory was purged; its content is gone", field="memory_id")


def memory_correct(
    *,
    tenant: Tenant,
    memory_id: str,
    actor: str,
    changes: dict[str, Any],
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
    inp = inputs.parse_update(changes, now=now, allowed=CORRECTABLE_FIELDS)  # + secrets
    memory = _operator_get(tenant, memory_id)
    _correctable(memory)  # first: a purged memory is tombstoned too, a CONFLICT like any other
    _not_purged(memory)
    cas = Cas(version=expected_version)
    if not inp.changes:
        change_guard(memory, cas)
        return memory
    kind = inp.changes.get("kind", memory.kind)
    try:
        with transaction.atomic():
            registry = kind_registry.kind_guard(tenant, kind)  # held until commit, as a store's
            return change(
                memory,
                fields=lambda current: update_fields(current, inp.changes, registry),
                actor=actor,
                change_type=ChangeType.CORRECT,
                now=now,
                cas=cas,
            )
    except IntegrityError as exc:
        conflict = single_conflict(exc, kind)
        if conflict is None:
            raise
        raise conflict from None


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
    return tombstone(memory, actor=actor, reason=clean_reason(reason), now=now)


def memory_bulk_tombstone(
    *,
    tenant: Tenant,
    memory_ids: list[str],
    actor: str,
    reason: str = "",
    now: datetime | None = None,
) -> int:
    """`Tombstone selected`: every listed memory or none (one transaction; an id the tenant
    does not hold is NOT_FOUND). Returns how many were listed."""
    now = resolve_now(now)
    reason = clean_reason(reason)
    ids = list(dict.fromkeys(memory_ids))
    with transaction.atomic():
        for memory_id in ids:
            memory_tombstone(
                tenant=tenant, memory_id=memory_id, actor=actor, reason=reason, now=now
            )
    return len(ids)


def memory_restore(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Bring a tombstoned, evicted or expired memory back to `active` (not a purged one).

    An expiry it asked for that is past already is cleared (its retention policy and its
    category's lifetime count from the restore, a write); a live memory holding the same key,
    or its owner's live record of the same single kind, is a CONFLICT; the owner's cap is
    enforced afterwards (never evicting the restored memory itself).
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
    if memory.requested_expires_at is not None and memory.requested_expires_at <= now:
        fields["requested_expires_at"] = None
    user_subject = memory.subject_id if memory.scope == Scope.USER else None
    try:
        with transaction.atomic():
            cap_lock(tenant, memory.agent, user_subject)
            memory = change(
                memory,
                fields=fields,
                actor=actor,
                change_type=ChangeType.RESTORE,
                now=now,
                cas=Cas(version=memory.version),
            )
            evict_over_cap(
                tenant=tenant,
                agent=memory.agent,
                now=now,
                exclude_ids=[memory.pk],
                cap_locked=True,
                user_subject=user_subject,
            )
    except IntegrityError as exc:
        conflict = single_conflict(exc, memory.kind)
        if conflict is None:
            raise
        raise conflict from None
    return memory


def memory_purge(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Right to erasure: remove text, data and embedding from the memory and its revisions."""
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    if memory.purged_at is not None:
        return memory
    return purge_content(memory, actor=actor, reason="purged", now=now)


def memory_approve(
    *, tenant: Tenant, memory_id: str, actor: str, now: datetime | None = None
) -> Memory:
    """Review queue `Approve`: `review_state=approved` and `last_confirmed_at` = now."""
    now = resolve_now(now)
    memory = _operator_get(tenant, memory_id)
    _not_purged(memory)
    return change(
        memory,
        fields={"review_state": ReviewState.APPROVED, "last_confirmed_at": now},
        actor=actor,
        change_type=ChangeType.APPROVE,
        now=now,
        reload=lambda: reload_any(memory),
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
                tombstone(
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
    scan_secrets({"tag": tag})  # as typed: lower-casing could hide a key's shape
    tag = validation.normalise_tag(tag)
    ids = [i for i in dict.fromkeys(memory_ids) if is_memory_id(i)]
    changed = 0
    with transaction.atomic():
        rows = (
            Memory.objects.for_tenant(tenant)
            .select_related("agent", "tenant")
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
            change(
                memory,
                fields=lambda current: {"tags": list(dict.fromkeys([*current.tags, tag]))},
                actor=actor,
                change_type=ChangeType.UPDATE,
                reason=f"tag {tag} added",
                now=now,
                reload=partial(reload_any, memory),
            )
            changed += 1
    return changed

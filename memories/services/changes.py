"""An agent changes a memory it may change (docs/api.md#change): PATCH and confirm."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction

from accounts.principal import Principal
from memories import inputs, kind_registry, retention, validation
from memories.horizon import write_stamp
from memories.ids import is_memory_id
from memories.models import ChangeType, Memory
from memories.secrets_scan import scan_secrets
from memories.services.writes import (
    change,
    change_guard,
    embeddings_remembered,
    reload_active,
    update_fields,
)
from memories.visibility import visible_memories
from memoryhub.errors import Conflict, NotFound, ScopeDenied


def writable(
    *, principal: Principal, memory_id: str, subject_id: str | None, now: datetime
) -> Memory:
    """A live memory the key may change: 404 when it cannot see it, 403 when it is shared."""
    if not is_memory_id(memory_id):
        raise NotFound()
    memory = (
        visible_memories(
            tenant=principal.tenant, agent=principal.agent, subject_id=subject_id, now=now
        )
        .select_related("agent")
        .filter(pk=memory_id)
        .first()
    )
    if memory is None:
        raise NotFound()
    if memory.agent_id not in (None, principal.agent.pk):
        raise ScopeDenied(
            "Memories shared by another agent are read-only", details={"memory_id": memory_id}
        )
    memory.tenant = principal.tenant  # the policies its expiry is computed from
    return memory


def key_capped(
    principal: Principal, changes: dict[str, Any], now: datetime
) -> Callable[[Memory], dict[str, Any]]:
    """The columns of a write through `principal`'s key, as a function of the row: what it asks
    for, with the expiry it may ask for capped by the key's `memory_ttl`."""

    def capped(current: Memory) -> dict[str, Any]:
        if principal.api_key is None or principal.api_key.memory_ttl is None:
            return changes
        requested = changes.get("requested_expires_at", current.requested_expires_at)
        return changes | {
            "requested_expires_at": retention.requested_expiry(
                requested, principal=principal, now=now
            )
        }

    return capped


def single_conflict(exc: IntegrityError, kind: str) -> Conflict | None:
    """The CONFLICT of a write that would leave an owner two live records of a single kind (or
    a key held twice), or None for any other integrity error."""
    if "memory_live_single_uniq" in str(exc):
        return Conflict(
            f"This owner and subject have a live '{kind}' already (a single kind)",
            details={"field": "kind"},
        )
    if "memory_live_key_uniq" in str(exc):
        return Conflict("Another live memory holds this key", details={"field": "key"})
    return None


def memory_update(
    *,
    principal: Principal,
    memory_id: str,
    data: dict[str, Any],
    if_match: str | None = None,
    subject_id: str | None = None,
    now: datetime | None = None,
    evidence: dict[str, Any] | None = None,
) -> Memory:
    """PATCH a memory: only the given fields; CAS via `expected_version`,
    `expected_updated_at` or `If-Match`. Shared memories are read-only (403).

    `evidence` is not an agent's field: extraction records with its update the
    messages it came from."""
    principal.require_scope("write")
    kind = ""
    try:
        with embeddings_remembered(), transaction.atomic():
            # Stamped once announced (`horizon.write_stamp`): a list walk never passes it first.
            now = write_stamp(now)
            inp = inputs.parse_update(data, now=now, if_match=if_match)  # secrets scanned too
            subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
            memory = writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
            if not inp.changes:
                if inp.cas is not None:
                    change_guard(memory, inp.cas)
                return memory

            def reload() -> Memory | None:
                fresh = (
                    visible_memories(
                        tenant=principal.tenant, agent=principal.agent, subject_id=subject, now=now
                    )
                    .select_related("agent")
                    .filter(pk=memory_id)
                    .first()
                )
                if fresh is not None:
                    fresh.tenant = principal.tenant
                return fresh

            capped = key_capped(principal, inp.changes, now)
            kind = inp.changes.get("kind", memory.kind)
            # Held until commit: a registry change waits for this write, or this write for it.
            registry = kind_registry.kind_guard(principal.tenant, kind)
            return change(
                memory,
                fields=lambda current: (
                    update_fields(current, capped(current), registry)
                    | ({"evidence": evidence} if evidence is not None else {})
                ),
                actor=principal.actor,
                change_type=ChangeType.UPDATE,
                now=now,
                cas=inp.cas,
                reload=reload,
            )
    except IntegrityError as exc:
        conflict = single_conflict(exc, kind)
        if conflict is None:
            raise
        raise conflict from None


def memory_confirm(
    *,
    principal: Principal,
    memory_id: str,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> Memory:
    """The agent re-confirms a fact: `last_confirmed_at` = now (a change: version + 1)."""
    principal.require_scope("write")
    with transaction.atomic():
        now = write_stamp(now)  # as `memory_update`
        scan_secrets({"subject_id": subject_id})
        subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
        memory = writable(principal=principal, memory_id=memory_id, subject_id=subject, now=now)
        return change(
            memory,
            fields=key_capped(principal, {"last_confirmed_at": now}, now),
            actor=principal.actor,
            change_type=ChangeType.CONFIRM,
            now=now,
            reload=lambda: reload_active(memory),
        )

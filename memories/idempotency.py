"""`Idempotency-Key` for agent POSTs: per tenant, kept 24 h, replayed byte for byte, and only
to the API key that sent the first request (see `fingerprint`).

A request with a key runs inside one transaction that first takes a transaction-level advisory
lock on (tenant, key): concurrent retries of the same request queue behind the first, then find
its stored response and replay it. The record is written in the same transaction as the change
it describes, so a replay never points at something that was rolled back. Only successful
responses are stored; an error leaves nothing behind and the retry runs again.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction

from accounts.models import Tenant
from memories.models import IdempotencyRecord
from memories.validation import compact_json
from memoryhub.errors import IdempotencyMismatch, InvalidInput

if TYPE_CHECKING:
    from accounts.principal import Principal

RETENTION = timedelta(hours=24)
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]
    replayed: bool = False


def clean_key(raw: str | None) -> str | None:
    """The header value, or None when absent; printable ASCII, at most 255 characters."""
    if raw is None or raw == "":
        return None
    if not KEY_RE.match(raw):
        raise InvalidInput(
            "Idempotency-Key must be 1–255 printable ASCII characters", field="Idempotency-Key"
        )
    return raw


def fingerprint(*, principal: Principal, operation: str, payload: Any) -> str:
    """What makes two requests "the same": who acts, the operation and the exact body.

    Who acts is the API key (and so its agent and subject binding), not only the agent: two
    keys of one agent bound to different subjects send the same body for different people, and
    a stored response must never be replayed to a principal other than the one that earned it.
    The same Idempotency-Key from another key answers IDEMPOTENCY_MISMATCH instead.
    """
    api_key = principal.api_key
    basis = compact_json(
        {
            "agent": principal.agent.pk,
            "api_key": api_key.pk if api_key is not None else None,
            "subject": principal.bound_subject,
            "operation": operation,
            "body": payload,
        }
    )
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def _lock(tenant_id: int, key: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"idem:{tenant_id}:{key}"]
        )


def _find(tenant: Tenant, key: str, request_hash: str, now: datetime) -> Outcome | None:
    record = IdempotencyRecord.objects.filter(
        tenant=tenant, key=key, created_at__gt=now - RETENTION
    ).first()
    if record is None:
        return None
    if record.request_hash != request_hash:
        raise IdempotencyMismatch()
    # The body is kept as a JSON string: jsonb would reorder its keys, and a replay must be
    # identical to the first response.
    body = record.response_body
    if isinstance(body, str):
        body = json.loads(body)
    return Outcome(status=record.response_status, body=body, replayed=True)


def peek(*, tenant: Tenant, key: str, request_hash: str, now: datetime) -> Outcome | None:
    """A lock-free early look (lets a retry skip validation and embedding work)."""
    return _find(tenant, key, request_hash, now)


def run_idempotent(
    *,
    tenant: Tenant,
    key: str,
    request_hash: str,
    now: datetime,
    action: Callable[[], tuple[int, dict[str, Any]]],
) -> Outcome:
    """Run `action` once per (tenant, key); later calls replay its stored response."""
    with transaction.atomic():
        _lock(tenant.pk, key)
        found = _find(tenant, key, request_hash, now)
        if found is not None:
            return found
        status, body = action()
        IdempotencyRecord.objects.filter(tenant=tenant, key=key).delete()  # an expired one
        IdempotencyRecord.objects.create(
            tenant=tenant,
            key=key,
            request_hash=request_hash,
            response_status=status,
            response_body=json.dumps(body, ensure_ascii=False, separators=(",", ":")),
            created_at=now,
        )
        return Outcome(status=status, body=body)


def forget_records_mentioning(*, tenant: Tenant, memory_id: str) -> int:
    """Purge erases content everywhere: drop stored responses that carry the memory."""
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM memories_idempotencyrecord WHERE tenant_id = %s "
            "AND response_body::text LIKE %s",
            [tenant.pk, f"%{memory_id}%"],
        )
        return cursor.rowcount

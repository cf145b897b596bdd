"""`Idempotency-Key` for agent POSTs: per tenant, kept 24 h, replayed byte for byte, and only
to the API key that sent the first request (see `fingerprint`). Every POST that accepts the
header goes through `respond` (REST's store, confirm and thread end; MCP's store, which has no
key to give).

A request with a key runs inside one transaction that first takes a transaction-level advisory
lock on (tenant, key): concurrent retries of the same request queue behind the first, then find
its stored response and replay it. The record is written in the same transaction as the change
it describes, so a replay never points at something that was rolled back. Only successful
responses are stored; an error leaves nothing behind and the retry runs again.

The key is a free-text field like any other (a client may paste a credential into it): it is
scanned for secrets (SECRET_REJECTED) and never stored, only `key_digest(tenant, key)`, an
HMAC-SHA256 keyed by `SECRET_KEY` (Django's `salted_hmac`, its own salt). Keyed, not a plain
hash, so that a low-entropy value cannot be recovered from a database dump by guessing. Rotating
`SECRET_KEY` makes the records of the last 24 h unreachable: a retry across the rotation runs
again, as one after 24 h does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connection, transaction
from django.utils.crypto import salted_hmac

from accounts.models import Tenant
from memories.clock import resolve_now
from memories.fingerprints import compact_json
from memories.models import IdempotencyRecord
from memories.secrets_scan import scan_secrets
from memoryhub.errors import IdempotencyMismatch, InvalidInput

if TYPE_CHECKING:
    from accounts.principal import Principal

Prepared = TypeVar("Prepared")

RETENTION = timedelta(hours=24)
KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass(frozen=True)
class Outcome:
    status: int
    body: dict[str, Any]
    replayed: bool = False


def clean_key(raw: str | None) -> str | None:
    """The header value, or None when absent; printable ASCII, at most 255 characters, and
    no secret (scanned first, so no other refusal can depend on it)."""
    if raw is None or raw == "":
        return None
    scan_secrets({"Idempotency-Key": raw})
    if not KEY_RE.fullmatch(raw):
        raise InvalidInput(
            "Idempotency-Key must be 1–255 printable ASCII characters", field="Idempotency-Key"
        )
    return raw


def key_digest(tenant_id: int, key: str) -> str:
    """What is stored and looked up instead of the key (64 hex characters)."""
    return salted_hmac(
        "memoryhub.idempotency-key", f"{tenant_id}:{key}", algorithm="sha256"
    ).hexdigest()


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


def _lock(tenant_id: int, digest: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"idem:{tenant_id}:{digest}"]
        )


def _find(
    tenant: Tenant,
    digest: str,
    request_hash: str,
    now: datetime,
    unseal: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Outcome | None:
    record = (
        IdempotencyRecord.objects.for_tenant(tenant)
        .filter(key_digest=digest, created_at__gt=now - RETENTION)
        .first()
    )
    if record is None:
        return None
    if record.request_hash != request_hash:
        raise IdempotencyMismatch()
    # The body is kept as a JSON string: jsonb would reorder its keys, and a replay must be
    # identical to the first response.
    body = record.response_body
    if isinstance(body, str):
        body = json.loads(body)
    if unseal is not None:
        body = unseal(body)
    return Outcome(status=record.response_status, body=body, replayed=True)


def respond(
    *,
    principal: Principal,
    operation: str,
    payload: Any,
    key: str | None,
    action: Callable[[Prepared], tuple[int, dict[str, Any]]],
    prepare: Callable[[], Prepared] | None = None,
    now: datetime | None = None,
    seal: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    unseal: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Outcome:
    """Answer an agent POST, once per (tenant, `key`): `action(prepare())` → (status, body).

    `prepare` is the work that needs no database (validation, secret scan, embedding): it runs
    before any transaction or lock, and not at all when a lock-free early look finds the stored
    response (a retry replays even while, say, the embedding backend is down). `action` makes
    the change; with a key it runs in the transaction that holds the (tenant, key) lock and
    records its response. The same key with another request (another body, operation or API
    key) raises IDEMPOTENCY_MISMATCH. Without a key it is `action(prepare())`
    (`action(None)` when there is no `prepare`).

    `seal` turns the response into what is stored, `unseal` back into what a replay answers: a
    response holding a secret (a new webhook's signing secret) is kept encrypted.

    Every such operation is a write: the scope is checked first, so a key without it learns
    nothing from the header, not even whether it is well-formed.
    """
    principal.require_scope("write")
    key = clean_key(key)
    if key is None:
        # Without `prepare` the action takes None (its Prepared is None).
        return Outcome(*action(prepare() if prepare else None))  # type: ignore[arg-type]
    now = resolve_now(now)
    tenant = principal.tenant
    digest = key_digest(tenant.pk, key)
    request_hash = fingerprint(principal=principal, operation=operation, payload=payload)
    early = _find(tenant, digest, request_hash, now, unseal)
    if early is not None:
        return early
    prepared = prepare() if prepare else None
    with transaction.atomic():
        _lock(tenant.pk, digest)
        found = _find(tenant, digest, request_hash, now, unseal)
        if found is not None:
            return found
        status, body = action(prepared)  # type: ignore[arg-type]  # as above
        # An expired record of the same key.
        IdempotencyRecord.objects.for_tenant(tenant).filter(key_digest=digest).delete()
        IdempotencyRecord.objects.create(
            tenant=tenant,
            key_digest=digest,
            request_hash=request_hash,
            response_status=status,
            response_body=json.dumps(
                seal(body) if seal else body, ensure_ascii=False, separators=(",", ":")
            ),
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

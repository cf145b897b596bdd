"""Conversations in (docs/formation.md): threads and their messages, stored after secret redaction.

`thread_messages_add` is the one write path for messages (REST and MCP `memory_ingest`); the
reads (`thread_get`, `thread_messages`) are the agent's view of its own threads.
"""

from __future__ import annotations

import hashlib
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction

from accounts.models import Extraction
from accounts.principal import Principal
from memories import cursors, validation
from memories.clock import resolve_now
from memories.formation.llm import llm_configured
from memories.formation.runs import run_request
from memories.models import MAX_MESSAGE_CHARS, Message, Role, Thread
from memories.redaction import redact
from memories.secrets_scan import scan_secrets
from memories.serialization import iso
from memoryhub.errors import InvalidInput, NotFound

MAX_BATCH = 100
MESSAGE_PAGE, MAX_MESSAGE_PAGE = 50, 200
MAX_SEQ = 2**31 - 1  # the seq column is a PostgreSQL integer
INGEST_FIELDS = frozenset({"messages", "subject_id", "extract"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "created_at"})
EXTRACT_CHOICES = ("auto", "now", "off")
# What an ingest changes of its thread (`_extraction_after_ingest` sets `extraction_due_at`).
INGEST_UPDATES = (
    "last_seq",
    "message_count",
    "last_message_at",
    "ended_at",
    "updated_at",
    "extraction_due_at",
)
DISABLED_REASON = "No LLM is configured (MEMORYHUB_LLM_URL is not set); messages are kept"


@dataclass
class MessageInput:
    role: str
    content: str  # redacted
    name: str | None
    created_at: datetime | None  # as given; None: the time of ingestion
    redactions: list[str]
    dedup_hash: str


@dataclass
class IngestResult:
    thread: Thread
    accepted: int
    duplicates: int
    redacted: int
    extraction: dict[str, Any] = field(default_factory=dict)


def _dedup_hash(role: str, content: str, created_at: Any) -> str:
    """What makes a resent message a duplicate: role, content as received and `created_at` as
    given (normalised). Hashed from the received text so a resent message with a pasted secret
    is still recognised; the hash is all that is kept of the original."""
    stamp = iso(created_at) if created_at is not None else ""
    raw = "\x1f".join((role, content, stamp or ""))
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


# Control characters (`\n`, `\r`, `\v`, `\f`, U+0085, ...) and line and paragraph separators
# (U+2028, U+2029): a sender's name is shown on one line of the extraction prompt.
_NAME_REFUSED_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def _one_line(value: Any, field: str) -> str | None:
    """A message's `name`: at most 255 characters on one line. The error names the
    field, never the value (it may hold a secret)."""
    if isinstance(value, str) and any(
        unicodedata.category(ch) in _NAME_REFUSED_CATEGORIES for ch in value
    ):
        raise InvalidInput(f"'{field}' contains control characters or line breaks", field=field)
    return validation.short_string(value, field, 255)


def parse_message(value: Any, index: int) -> MessageInput:
    where = f"messages[{index}]"
    if not isinstance(value, dict):
        raise InvalidInput(f"'{where}' must be an object", field=where)
    validation.reject_unknown(value, MESSAGE_FIELDS, where)
    role = value.get("role")
    if role not in Role.values:
        raise InvalidInput(
            f"'{where}.role' must be one of {', '.join(Role.values)}", field=f"{where}.role"
        )
    content = value.get("content")
    if not isinstance(content, str) or not content.strip():
        raise InvalidInput(
            f"'{where}.content' must be a non-empty string", field=f"{where}.content"
        )
    if len(content) > MAX_MESSAGE_CHARS:
        raise InvalidInput(
            f"'{where}.content' is longer than {MAX_MESSAGE_CHARS} characters",
            field=f"{where}.content",
        )
    name = _one_line(value.get("name"), f"{where}.name")
    created_at = None
    if value.get("created_at") is not None:
        created_at = validation.parse_timestamp(value["created_at"], f"{where}.created_at")
    dedup_hash = _dedup_hash(role, content, created_at)
    content, rules = redact(content)
    if name is not None:
        name, name_rules = redact(name)
        rules = list(dict.fromkeys(rules + name_rules))
    return MessageInput(role, content, name, created_at, rules, dedup_hash)


# The write half of an ingest is the hottest path of formation (every turn of every agent), so
# its statements are written out rather than compiled by the ORM each time (a third of its CPU).
_THREAD_FIELDS = list(Thread._meta.concrete_fields)
_THREAD_LOCK_SQL = (
    f"SELECT {', '.join(f.column for f in _THREAD_FIELDS)} FROM {Thread._meta.db_table} "
    "WHERE tenant_id = %s AND agent_id = %s AND thread_id = %s "
    "AND COALESCE(subject_id, '') = %s FOR UPDATE"  # the thread_identity_uniq index
)
_MESSAGE_COLUMNS = (
    "tenant_id, thread_id, seq, role, content, name, created_at, redactions, dedup_hash"
)


def _thread_locked(principal: Principal, thread_id: str, subject_id: str | None, now) -> Thread:
    """The thread, created on first use, locked for this transaction (seqs are assigned under
    the lock, so concurrent batches of one thread queue up and seqs stay dense)."""
    thread = _thread_for_update(principal, thread_id, subject_id)
    if thread is None:
        Thread.objects.bulk_create(
            [
                Thread(
                    tenant=principal.tenant,
                    agent=principal.agent,
                    thread_id=thread_id,
                    subject_id=subject_id,
                    created_at=now,
                    updated_at=now,
                )
            ],
            ignore_conflicts=True,  # a concurrent first batch may have created it
        )
        thread = _thread_for_update(principal, thread_id, subject_id)
        if thread is None:  # created just now (by this batch or a concurrent one): never gone
            raise RuntimeError(f"thread {thread_id!r} vanished while being created")
    thread.tenant, thread.agent = principal.tenant, principal.agent
    return thread


def _thread_for_update(
    principal: Principal, thread_id: str, subject_id: str | None
) -> Thread | None:
    with connection.cursor() as cursor:
        cursor.execute(
            _THREAD_LOCK_SQL,
            [principal.tenant.pk, principal.agent.pk, thread_id, subject_id or ""],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    return Thread.from_db(connection.alias, [f.attname for f in _THREAD_FIELDS], row)


def _known_hashes(thread: Thread, hashes: list[str]) -> set[str]:
    """The batch's messages the thread already holds (by `dedup_hash`)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT dedup_hash FROM {Message._meta.db_table} "
            "WHERE tenant_id = %s AND thread_id = %s AND dedup_hash = ANY(%s)",
            [thread.tenant_id, thread.pk, hashes],
        )
        return {row[0] for row in cursor.fetchall()}


def _insert_messages(thread: Thread, messages: list[MessageInput], now: datetime) -> None:
    """The new messages in one multi-row INSERT, numbered on from the thread's `last_seq`
    (under its lock)."""
    if not messages:
        return
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s::varchar(64)[], %s)"] * len(messages))
    params: list[Any] = []
    for offset, message in enumerate(messages, start=1):
        params += [
            thread.tenant_id,
            thread.pk,
            thread.last_seq + offset,
            message.role,
            message.content,
            message.name,
            message.created_at or now,
            message.redactions,
            message.dedup_hash,
        ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {Message._meta.db_table} ({_MESSAGE_COLUMNS}) VALUES {values}", params
        )


def _thread_qs(principal: Principal, thread_id: str, subject_id: str | None):
    qs = Thread.objects.for_tenant(principal.tenant).filter(
        agent=principal.agent, thread_id=thread_id
    )
    if subject_id is None:
        return qs.filter(subject_id__isnull=True)
    return qs.filter(subject_id=subject_id)


def thread_messages_add(
    *, principal: Principal, thread_id: str | None, data: Any, now: datetime | None = None
) -> IngestResult:
    """Store a batch of messages (1–100) in a thread, skipping ones it already holds.

    Secret spans are replaced by `[redacted:<rule>]` before anything is stored. With `extract`
    `auto` the thread is due for extraction once idle for the agent's
    `extraction_idle_seconds`; `now` queues a run at once; `off` schedules nothing.
    """
    principal.require_scope("write")
    now = resolve_now(now)
    data = validation.require_object(data)
    validation.reject_unknown(data, INGEST_FIELDS)
    thread_id = validation.identifier(thread_id, "thread_id")
    if thread_id is None:
        raise InvalidInput("'thread_id' is required", field="thread_id")
    subject_id = principal.resolve_subject(
        validation.identifier(data.get("subject_id"), "subject_id")
    )
    scan_secrets({"thread_id": thread_id, "subject_id": subject_id})
    extract = validation.choice(data.get("extract"), "extract", EXTRACT_CHOICES, "auto")
    raw = data.get("messages")
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_BATCH:
        raise InvalidInput(f"'messages' must be a list of 1–{MAX_BATCH} messages", field="messages")
    messages = [parse_message(value, index) for index, value in enumerate(raw)]

    with transaction.atomic():
        thread = _thread_locked(principal, thread_id, subject_id, now)
        known = _known_hashes(thread, [m.dedup_hash for m in messages])
        fresh: list[MessageInput] = []
        for message in messages:
            if message.dedup_hash not in known:
                known.add(message.dedup_hash)
                fresh.append(message)
        _insert_messages(thread, fresh, now)
        if fresh:
            thread.last_seq += len(fresh)
            thread.message_count += len(fresh)
            thread.last_message_at = now
            # New messages reopen an ended thread: the conversation goes on, and retention
            # (which counts from `ended_at`) must not take them.
            thread.ended_at = None
        thread.updated_at = now
        extraction = _extraction_after_ingest(principal, thread, extract, now)
        thread.save(update_fields=INGEST_UPDATES)
        if extraction["state"] == "queued":
            run_request(thread=thread, trigger="now", now=now)
    return IngestResult(
        thread=thread,
        accepted=len(fresh),
        duplicates=len(messages) - len(fresh),
        redacted=sum(1 for message in fresh if message.redactions),
        extraction=extraction,
    )


def _extraction_after_ingest(
    principal: Principal, thread: Thread, extract: str, now: datetime
) -> dict[str, Any]:
    """What happens next to the thread's new messages; sets `thread.extraction_due_at`."""
    if not llm_configured():
        return {"state": "disabled", "reason": DISABLED_REASON}
    if principal.agent.extraction == Extraction.OFF:
        return {"state": "off", "reason": "Extraction is off for this agent"}
    if extract == "off":
        return {"state": "off"}
    if thread.pending_messages == 0:
        return {"state": "off", "reason": "No messages wait for extraction"}
    if extract == "now":
        thread.extraction_due_at = None
        return {"state": "queued"}
    thread.extraction_due_at = now + timedelta(seconds=principal.agent.extraction_idle_seconds)
    return {"state": "scheduled", "due_at": iso(thread.extraction_due_at)}


# --- reads -----------------------------------------------------------------------------------


def thread_find(
    *, principal: Principal, thread_id: str | None, subject_id: str | None = None
) -> Thread:
    """The agent's thread for the subject, whatever the key's scopes (callers check them);
    another agent's, subject's or tenant's thread is NOT_FOUND, like a missing one."""
    thread_id = validation.identifier(thread_id, "thread_id")
    subject_id = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    thread = _thread_qs(principal, thread_id, subject_id).first() if thread_id else None
    if thread is None:
        raise NotFound("No such thread")
    return thread


def thread_get(*, principal: Principal, thread_id: str, subject_id: str | None = None) -> Thread:
    """The agent's thread for the subject; another agent's, subject's or tenant's is NOT_FOUND."""
    principal.require_scope("read")
    return thread_find(principal=principal, thread_id=thread_id, subject_id=subject_id)


def thread_messages(
    *,
    principal: Principal,
    thread_id: str,
    subject_id: str | None = None,
    cursor: str | None = None,
    limit: Any = None,
) -> tuple[list[Message], str | None]:
    """One page of the thread's messages in `seq` order, and the next page's cursor (None on
    the last page). The cursor names the last seq returned; seqs only grow, so a walk returns
    every message once, and messages added during it come on later pages."""
    thread = thread_get(principal=principal, thread_id=thread_id, subject_id=subject_id)
    limit = validation.parse_limit(limit, default=MESSAGE_PAGE, maximum=MAX_MESSAGE_PAGE)
    after = _seq_cursor(cursor) if cursor else 0
    rows = list(
        Message.objects.for_tenant(principal.tenant)
        .filter(thread=thread, seq__gt=after)
        .order_by("seq")[: limit + 1]
    )
    if len(rows) <= limit:
        return rows, None
    rows = rows[:limit]
    return rows, cursors.encode([rows[-1].seq])


def _seq_cursor(cursor: str) -> int:
    try:
        (seq,) = cursors.decode(cursor)
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= MAX_SEQ:
            raise ValueError
    except (ValueError, TypeError):
        raise InvalidInput("'cursor' is not a cursor this API returned", field="cursor") from None
    return seq

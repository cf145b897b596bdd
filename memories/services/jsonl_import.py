"""Import a JSONL backup (`memories.jsonl`'s lines) into a tenant, in three steps.

- Parse (`jsonl_parse`): every line, before anything is written, becomes an `ImportLine` (its
  fields checked and normalised by the store API's field rules and secret scan) or an
  `ImportLineError` naming the line.
- Check (`check`): the memory as the line leaves it meets the rules of a stored memory, by the
  functions a store uses (`inputs.memory_fields_check`, `kind_registry.check_data`, the model's
  validators).
- Apply (`apply`, `_write`): the line over the stored memory, its one revision and event; a new
  agent named by a line is created by `accounts.services.agent_create`.

Idempotent by memory id (a line whose id already exists in the tenant updates that memory to
the line's values) and all or nothing: everything is written in one transaction, and a bad line,
whether caught while reading or while writing (a key already held by a live memory), is
reported by its number and nothing of the file is applied. Ids are global, but an import never
says that one exists in another tenant: such an id is refused with the words used for a
malformed one (`UNIMPORTABLE_ID`), and at the same step, after every line was read.
`size_bytes` and `content_hash` are recomputed from the content, never trusted (a purged
memory, with no content left, keeps the line's).

Versions never move backwards (every revision of a memory has its own version): a line that
changes an existing memory makes it the next version, whatever version the file says, so an
older backup is one more change on top of the history. A new id keeps the file's version unless
this tenant's history already has revisions of it (a memory retention deleted, imported again):
then it continues after them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from accounts import services as account_services
from accounts.models import Agent, Tenant
from memories import fingerprints, inputs, kind_registry, retention, validation
from memories.events.record import memory_events_write_many
from memories.ids import is_memory_id
from memories.jsonl import DATETIME_FIELDS, FORMAT, MEMORIES, PLAIN_FIELDS, TENANT, memory_to_record
from memories.models import (
    EMBEDDING_DIM,
    CaptureMode,
    Category,
    ChangeType,
    Memory,
    MemoryRevision,
    ReviewReason,
    ReviewState,
    Scope,
    Status,
)
from memories.revisions import revision_build, snapshot
from memories.secrets_scan import scan_secrets
from memories.services.sequences import lock_rows
from memoryhub.errors import DomainError, InvalidInput, SecretRejected

MAX_INT = 2**31 - 1  # version and size_bytes are PostgreSQL integers
MAX_BIGINT = 2**63 - 1  # access_count

# One answer for every id this tenant cannot take: malformed, missing, or another tenant's.
UNIMPORTABLE_ID = "memory id cannot be imported into this tenant"


class ImportLineError(Exception):
    """A bad line: `line` is 1-based."""

    def __init__(self, line: int, message: str):
        self.line, self.message = line, message
        super().__init__(f"line {line}: {message}")


@dataclass
class ImportResult:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class ImportLine:
    """A parsed line: its 1-based number and its fields, checked and normalised one by one
    (`id` and `status` always there; any other field the line omits is absent)."""

    number: int
    fields: dict[str, Any]


def jsonl_import(*, tenant: Tenant, actor: str, lines: Iterable[str | bytes]) -> ImportResult:
    """Import the JSONL backup `lines` into `tenant` as `actor` (`operator:<email>`), all or
    nothing: raises `ImportLineError` on the first bad line, with nothing applied."""
    parsed = jsonl_parse(lines)
    # Live rows last: a backup may hold a tombstoned memory and its live successor under the
    # same key, and the live-key constraint must see the old one leave `active` first.
    parsed.sort(key=lambda line: line.fields["status"] == Status.ACTIVE)

    result = ImportResult()
    registry = kind_registry.registry(tenant)
    with transaction.atomic():
        _refuse_unimportable_ids(tenant, parsed)
        agents = {a.slug: a for a in Agent.objects.for_tenant(tenant)}
        ids = [line.fields["id"] for line in parsed]
        # Their sequences' locks first (`services.sequences`); a line that moves a memory to
        # another thread takes that one's in the update trigger, holding no row of it.
        existing = {
            m.pk: m for m in lock_rows(Memory.objects.for_tenant(tenant).filter(pk__in=ids))
        }
        # The newest revision version of each id in this tenant's history: the row may be gone
        # (retention) while its revisions stay, and a version must not repeat.
        latest = dict(
            MemoryRevision.objects.for_tenant(tenant)
            .filter(memory_id__in=ids)
            .values("memory_id")
            .annotate(latest=Max("version"))
            .values_list("memory_id", "latest")
        )
        revisions: list[MemoryRevision] = []
        changes: list[tuple[Memory, dict[str, Any]]] = []
        for line in parsed:
            record = line.fields
            agent = _agent(tenant, agents, line)
            memory = existing.get(record["id"])
            history = latest.get(record["id"], 0)
            if memory is None:
                memory = Memory(pk=record["id"], tenant=tenant)
                before = None
                apply(memory, record, agent, registry)
                if history:
                    memory.version = max(memory.version, history + 1)
                result.created += 1
            else:
                before = snapshot(memory)
                old = _content(memory)
                version = max(memory.version, history) + 1
                memory.tenant = tenant
                apply(memory, record, agent, registry)
                if _content(memory) == old:
                    result.unchanged += 1
                    continue
                memory.version = version
                result.updated += 1
            check(line.number, memory, registry)
            revision = _write(line.number, memory, before=before, actor=actor)
            revisions.append(revision)
            changes.append(
                (
                    memory,
                    {
                        "change_type": revision.change_type,
                        "before": before,
                        "after": revision.after,
                        "now": revision.created_at,
                    },
                )
            )
        MemoryRevision.objects.bulk_create(revisions)
        memory_events_write_many(changes)  # what `revision_write` does for one
    return result


# --- parse -----------------------------------------------------------------------------------


def jsonl_parse(lines: Iterable[str | bytes]) -> list[ImportLine]:
    """Every memory line of `lines` as an `ImportLine`, in file order (a memories file's header
    is checked and skipped); raises `ImportLineError` on the first line that is not a valid
    memory record (or repeats an id)."""
    parsed: list[ImportLine] = []
    seen: set[str] = set()
    for number, raw in numbered_lines(lines):
        record = json_object(number, raw)
        kind = record.get("type", "memory")
        if kind == "header":
            check_header(number, record, contents=MEMORIES)
            continue
        if kind != "memory":
            raise ImportLineError(number, "a memories file holds memory lines only")
        record = memory_fields(number, record)
        marker = json.dumps(record.get("id"))
        if marker in seen:
            raise ImportLineError(number, "the same memory id appears twice")
        seen.add(marker)
        parsed.append(ImportLine(number=number, fields=record))
    return parsed


def is_tenant_file(upload: Any) -> bool:
    """Whether the first non-blank line of the file `upload` is a tenant file's header; the
    file is left at its start."""
    upload.seek(0)
    try:
        for raw in upload:
            if raw.strip():
                try:
                    record = json.loads(raw)
                except ValueError:
                    return False
                return (
                    isinstance(record, dict)
                    and record.get("type") == "header"
                    and record.get("contents") == TENANT
                )
        return False
    finally:
        upload.seek(0)


def numbered_lines(lines: Iterable[str | bytes]) -> Iterator[tuple[int, str]]:
    """The non-blank lines of `lines` as text, each with its 1-based number (blank ones count)."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportLineError(number, "not UTF-8") from exc
        if raw.strip():
            yield number, raw


def json_object(number: int, line: str) -> dict[str, Any]:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ImportLineError(number, f"not valid JSON ({exc.msg})") from exc
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ImportLineError(number, "not valid JSON (a number too long)") from exc
    except RecursionError:
        raise ImportLineError(number, "not valid JSON (nested too deeply)") from None
    if not isinstance(record, dict):
        raise ImportLineError(number, "each line must be a JSON object")
    return record


def check_header(number: int, record: dict[str, Any], *, contents: str) -> None:
    """A header line of a file of `contents` (`tenant` or `memories`) in a format this reads."""
    if record.get("format") != FORMAT:
        raise ImportLineError(number, f"unknown format (this reads {FORMAT})")
    if record.get("contents") != contents:
        raise ImportLineError(
            number,
            f"a {record.get('contents')!s:.20} file, not a {contents} file"
            + (
                " (a tenant file is imported into a new or empty tenant)"
                if record.get("contents") == TENANT
                else ""
            ),
        )


def memory_fields(number: int, record: dict[str, Any]) -> dict[str, Any]:
    """A memory line's fields, secret-scanned, checked and normalised by the API's field rules."""
    # First, as written (before tags are lower-cased), and before any check that quotes.
    secret_free(number, record)
    try:
        _validate_fields(record)
    except InvalidInput as exc:
        raise ImportLineError(number, field_message(exc)) from None
    return record


def secret_free(number: int, values: dict[str, Any]) -> None:
    """The secret scan of the API's free-text fields of `values` (`memories.secrets_scan`)."""
    try:
        scan_secrets(values)
    except SecretRejected as exc:
        # Rule and field only: the value itself is never echoed.
        field, rule = exc.details["field"], exc.details["rule"]
        raise ImportLineError(
            number, f"{field}: a secret-shaped value ({rule}) is never stored"
        ) from None


def _validate_fields(record: dict[str, Any]) -> None:
    """The API's field rules (`memories.validation`), normalising `record` in place.

    Only fields present in the line are checked; a missing one takes the model default.
    """
    # The embedding is numbers (checked below): walking its 384 items here would only cost.
    validation.reject_nul({name: value for name, value in record.items() if name != "embedding"})
    if record.get("status") not in Status.values:
        raise InvalidInput("unknown status", field="status")
    checks: dict[str, Callable[[Any], Any]] = {
        "review_state": lambda v: validation.choice(
            v, "review_state", tuple(ReviewState.values), ReviewState.NONE
        ),
        "capture_mode": lambda v: validation.choice(
            v, "capture_mode", tuple(CaptureMode.values), CaptureMode.EXPLICIT
        ),
        "review_reason": lambda v: validation.choice(
            v, "review_reason", ("", *ReviewReason.values), ""
        ),
        "text": validation.text,
        "data": validation.data_object,
        "tags": validation.tags,
        "mentions": validation.mentions,
        "category": lambda v: validation.category(v, default=Category.CORE),
        "kind": validation.kind,
        "scope": lambda v: validation.choice(v, "scope", tuple(Scope.values), Scope.AGENT),
        "key": validation.memory_key,
        "subject_id": lambda v: validation.identifier(v, "subject_id"),
        "thread_id": lambda v: validation.identifier(v, "thread_id"),
        "source_provider": lambda v: validation.short_string(v, "source_provider", 100),
        "importance": lambda v: validation.unit_float(v, "importance"),
        "confidence": lambda v: validation.unit_float(v, "confidence"),
        "version": lambda v: whole_number(v, "version", minimum=1),
        "access_count": lambda v: whole_number(v, "access_count", maximum=MAX_BIGINT),
        "size_bytes": lambda v: whole_number(v, "size_bytes"),
    }
    for name, check in checks.items():
        if name in record:
            record[name] = check(record[name])
    for name in DATETIME_FIELDS:
        if record.get(name) is not None:
            record[name] = validation.parse_timestamp(record[name], name)
    embedding = record.get("embedding")
    if embedding is not None and not (
        isinstance(embedding, list)
        and len(embedding) == EMBEDDING_DIM
        and _finite_numbers(embedding)
    ):
        raise InvalidInput(f"must be a list of {EMBEDDING_DIM} numbers", field="embedding")


def whole_number(value: Any, field: str, *, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidInput(f"must be a whole number from {minimum} to {maximum}", field=field)
    return int(value)


def _finite_numbers(values: list[Any]) -> bool:
    """Every item an int or a float (not a bool) and finite: their sum is, unless one is
    NaN or infinite (or they are too large for any embedding, which is refused as well)."""
    return all(type(x) is float or type(x) is int for x in values) and math.isfinite(sum(values))


def field_message(exc: DomainError) -> str:
    """ "field: message", without naming the field twice when the message quotes it already."""
    field = exc.details.get("field")
    if not field or f"'{field}'" in exc.message:
        return exc.message
    return f"{field}: {exc.message}"


def _refuse_unimportable_ids(tenant: Tenant, parsed: list[ImportLine]) -> None:
    """The first line, by number, whose id is malformed or held by another tenant: one message
    for both, so an import cannot probe for other tenants' ids. (One created concurrently after
    this look fails at its insert with the same message: `integrity_message`.)"""
    ids = [line.fields["id"] for line in parsed if is_memory_id(line.fields.get("id"))]
    foreign = set(
        Memory.objects.filter(pk__in=ids).exclude(tenant=tenant).values_list("pk", flat=True)
    )
    for line in sorted(parsed, key=lambda line: line.number):
        if not is_memory_id(line.fields.get("id")) or line.fields["id"] in foreign:
            raise ImportLineError(line.number, UNIMPORTABLE_ID)


# --- check -----------------------------------------------------------------------------------


def check(
    number: int, memory: Memory, registry: kind_registry.Registry, *, queries: bool = True
) -> None:
    """The rules of a stored memory, on the memory as the line leaves it (a field the line
    omits keeps its current value; `agent` is always the line's): the cross-field rules, the
    kind's schema, the model's validators. Without `queries`, the model's unique and check
    constraints are left to the database (each is a query per memory here); the caller maps
    an insert's failure to its line."""
    try:
        inputs.memory_fields_check(
            category=memory.category,
            thread_id=memory.thread_id,
            scope=memory.scope,
            subject_id=memory.subject_id,
            has_agent=memory.agent_id is not None,
        )
        kind_registry.check_data(registry.rule(memory.kind), memory.data)
    except InvalidInput as exc:
        raise ImportLineError(number, exc.message) from None
    try:
        memory.full_clean(
            exclude=["tenant", "agent", "embedding", "search_vector"],
            validate_unique=queries,
            validate_constraints=queries,
        )
    except Exception as exc:
        raise ImportLineError(number, first_error(exc)) from exc


def first_error(exc: Exception) -> str:
    message_dict = getattr(exc, "message_dict", None)
    if message_dict:
        name, messages = next(iter(message_dict.items()))
        return f"{name}: {messages[0]}"
    return "invalid record"


# --- apply -----------------------------------------------------------------------------------


def _agent(tenant: Tenant, agents: dict[str, Agent], line: ImportLine) -> Agent | None:
    """The line's agent by slug (None: no agent), created when this tenant has none of it."""
    slug = line.fields.get("agent")
    if not slug:
        return None
    if not isinstance(slug, str):
        raise ImportLineError(line.number, "invalid agent slug")
    agent = agents.get(slug)
    if agent is None:
        try:
            agent = account_services.agent_create(tenant=tenant, slug=slug)
        except InvalidInput:
            raise ImportLineError(line.number, "invalid agent slug") from None
        agents[slug] = agent
    return agent


def apply(
    memory: Memory, record: dict[str, Any], agent: Agent | None, registry: kind_registry.Registry
) -> None:
    """The line's values over `memory`, and what a write derives from them."""
    memory.agent = agent
    for name in PLAIN_FIELDS + DATETIME_FIELDS:
        if name in record:
            setattr(memory, name, record[name])
    # What the memory asked for: the line's `requested_expires_at`, or in a line written before
    # that was exported, its `expires_at` (the effective expiry, at most what was asked for);
    # this tenant's policies bound it again (`memories.retention`), and its registry says
    # whether the kind is single.
    if "requested_expires_at" not in record:
        memory.requested_expires_at = memory.expires_at
    memory.expires_at = retention.effective_expiry(
        requested=memory.requested_expires_at,
        last_write=memory.updated_at,
        category=memory.category,
        tenant=memory.tenant,
        owner=agent,
    )
    memory.kind_single = registry.rule(memory.kind).single
    memory.embedding = record.get("embedding")
    if memory.embedding is None:  # no vector: its model is "" (and `reembed` embeds it)
        memory.embedding_model = ""
    if memory.purged_at is None or memory.text or memory.data is not None:
        # Derived as a store derives them, never taken from the file: a smaller size would cheat
        # hydrate's budget, a wrong hash dedup and `previously_corrected`. A purged memory has no
        # content left to derive from and keeps the hash the backup carries.
        memory.size_bytes = fingerprints.size_bytes(memory.text, memory.data)
        memory.content_hash = fingerprints.content_hash(memory.text, memory.data)


def _content(memory: Memory) -> dict[str, Any]:
    """What a line may change: every exported field but the version, which import assigns."""
    record = memory_to_record(memory)
    del record["version"]
    return record


def _write(
    number: int, memory: Memory, *, before: dict[str, Any] | None, actor: str
) -> MemoryRevision:
    """Save the checked memory; returns its revision, for the caller to write with the rest."""
    try:
        memory.save()
    except IntegrityError as exc:
        raise ImportLineError(number, integrity_message(exc, memory)) from None
    return revision_build(
        memory=memory,
        actor=actor,
        change_type=ChangeType.IMPORT,
        reason="JSONL import",
        before=before,
        after=snapshot(memory),
    )


def integrity_message(exc: IntegrityError, memory: Memory) -> str:
    constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if constraint == "memories_memory_pkey":  # the id was taken, here or in another tenant
        return UNIMPORTABLE_ID
    if constraint == "memory_live_key_uniq":
        key = memory.key or ""
        key = key if len(key) <= 80 else key[:79] + "…"
        return f"key '{key}' is already held by a live memory of the same owner and subject"
    if constraint == "memory_live_single_uniq":
        return f"the owner and subject have a live '{memory.kind}' already (a single kind)"
    return f"violates the database constraint {constraint or 'of this table'}"

"""A store's and a PATCH's whole body (a store or a change), parsed into typed inputs with
the field rules of `memories.validation`, the kind rules of the tenant's registry
(`memories.kind_registry`: a kind's default category, its schema, its cardinality) and the user scope
(`memory_fields_check`). Nothing here touches the database: the registry comes in as read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from accounts.models import Agent
from memories import kind_registry
from memories.cas import Cas, cas
from memories.models import CaptureMode, Category, Scope
from memories.secrets_scan import scan_secrets
from memories.validation import (
    _MISSING,
    DEDUP_POLICIES,
    category,
    choice,
    data_object,
    expiry,
    identifier,
    kind,
    memory_key,
    mentions,
    occurred,
    parse_timestamp,
    reject_unknown,
    require_object,
    short_string,
    tags,
    text,
    thread,
    unit_float,
)
from memoryhub.errors import InvalidInput

STORE_FIELDS = frozenset(
    {
        "text",
        "key",
        "category",
        "kind",
        "scope",
        "data",
        "tags",
        "subject_id",
        "thread_id",
        "session_id",
        "importance",
        "confidence",
        "capture_mode",
        "source_provider",
        "mentions",
        "occurred_at",
        "ttl",
        "expires_at",
        "last_confirmed_at",
        "dedup_policy",
        "expected_version",
        "expected_updated_at",
    }
)
UPDATE_FIELDS = frozenset(
    {
        "text",
        "data",
        "tags",
        "category",
        "kind",
        "importance",
        "confidence",
        "mentions",
        "occurred_at",
        "ttl",
        "expires_at",
        "last_confirmed_at",
        "expected_version",
        "expected_updated_at",
    }
)


@dataclass
class StoreInput:
    text: str
    key: str | None
    category: str
    kind: str
    data: dict | None
    tags: list[str]
    subject_id: str | None
    thread_id: str | None
    importance: float
    confidence: float
    capture_mode: str
    source_provider: str | None
    mentions: list[dict[str, str]]
    expires_at: datetime | None
    last_confirmed_at: datetime
    dedup_policy: str
    occurred_at: datetime | None = None
    cas: Cas | None = None
    scope: str = Scope.AGENT
    # The kind's rule as the registry had it (`memories.kind_registry`): one live record per owner and
    # subject (`single`), and the registry version it was read at.
    kind_single: bool = False
    kinds_version: int = 0

    @property
    def is_workspace(self) -> bool:
        return self.category == Category.WORKSPACE


def scope(value: Any) -> str:
    return choice(value, "scope", tuple(Scope.values), Scope.AGENT)


def memory_fields_check(
    *,
    category: str,
    thread_id: str | None,
    scope: str | None = None,
    subject_id: str | None = None,
    has_agent: bool | None = None,
    category_changed: bool = False,
) -> None:
    """The rules between a memory's fields, in the one place every write checks them: a store
    (formation's adds too), a PATCH and the console's correction (`services.writes
    .update_fields`), a JSONL import. Raises INVALID_INPUT naming the field at fault.

    - A conversation memory lives within one run: it needs a thread. A store or an import names
      the missing `thread_id`; a change of an existing memory's category (`category_changed`,
      its thread being fixed) names `category`.
    - A user memory belongs to a subject across every agent: it has no agent, needs a subject,
      and is neither a workspace memory (every subject's) nor a conversation memory (one
      agent's run).
    - Otherwise a memory is a workspace memory if and only if it has no agent.

    A rule is checked when its fields are given: `scope=None` (a store's body, read before the
    key's bound subject is known) skips the scope's rules, `has_agent=None` (a write that
    derives the owner from the scope and the category) the owner's. The database holds the
    same rules (`Memory.Meta.constraints`)."""
    if category == Category.CONVERSATION and not thread_id:
        field_name = "category" if category_changed else "thread_id"
        raise InvalidInput("A conversation memory needs a 'thread_id'", field=field_name)
    if scope == Scope.USER:
        if has_agent:
            raise InvalidInput("A user memory has no agent ('agent' must be null)", field="agent")
        if not subject_id:
            raise InvalidInput("A user-scoped memory needs a 'subject_id'", field="subject_id")
        if category in (Category.WORKSPACE, Category.CONVERSATION):
            raise InvalidInput(
                f"A user-scoped memory cannot be a {category} memory", field="category"
            )
    elif scope is not None and has_agent is not None:
        if category == Category.WORKSPACE and has_agent:
            raise InvalidInput(
                "A workspace memory has no agent ('agent' must be null)", field="agent"
            )
        if category != Category.WORKSPACE and not has_agent:
            raise InvalidInput(
                "A memory without an agent must be in the 'workspace' category", field="agent"
            )


def parse_store(
    data: Any, *, agent: Agent, now: datetime, registry: kind_registry.Registry | None = None
) -> StoreInput:
    """Validate a store body and apply the kind's and the agent's defaults.

    `registry` (the tenant's kinds) decides the kind's rules: its default category, its schema
    (`data` checked against it: INVALID_INPUT with `details.errors`), its cardinality. Without
    it every kind is a free label. A `single` kind's store may be compare-and-set without a key
    (it names the one record). The user scope's subject is checked by the store, which knows
    the key's bound subject."""
    data = require_object(data)
    scan_secrets(data)
    reject_unknown(data, STORE_FIELDS)
    text_value = text(data.get("text"))
    data_value = data_object(data.get("data"))
    if not text_value.strip() and data_value is None:
        raise InvalidInput("'text' is required unless 'data' is given", field="text")
    kind_name = kind(data.get("kind"))
    rule = registry.rule(kind_name) if registry is not None else kind_registry.FREE_LABEL
    kind_registry.check_data(rule, data_value)
    cat = category(data.get("category"), default=rule.default_category or agent.default_category)
    thread_id = thread(data)
    # The thread's rule now; the scope's once the store knows the key's subject.
    memory_fields_check(category=cat, thread_id=thread_id)
    expires = expiry(data, now=now)
    if expires is _MISSING:  # an explicit `expires_at: null` means "never", default or not
        expires = now + agent.default_ttl if agent.default_ttl else None
    last_confirmed = data.get("last_confirmed_at")
    key = memory_key(data.get("key"))
    store_cas = cas(data)
    if store_cas is not None and key is None and not rule.single:
        # Compare-and-set names the version of a keyed memory (or of a single kind's one
        # record); without either there is nothing to compare against, and ignoring it would
        # let a client believe its write was guarded.
        name = (
            "expected_version"
            if data.get("expected_version") is not None
            else "expected_updated_at"
        )
        raise InvalidInput(
            f"'{name}' needs a 'key' or a single kind (compare-and-set is per record)",
            field=name,
        )
    return StoreInput(
        text=text_value,
        key=key,
        category=cat,
        kind=kind_name,
        scope=scope(data.get("scope")),
        kind_single=rule.single,
        kinds_version=registry.version if registry is not None else 0,
        data=data_value,
        tags=tags(data.get("tags")),
        subject_id=identifier(data.get("subject_id"), "subject_id"),
        thread_id=thread_id,
        importance=0.5
        if data.get("importance") is None
        else unit_float(data["importance"], "importance"),
        confidence=1.0
        if data.get("confidence") is None
        else unit_float(data["confidence"], "confidence"),
        capture_mode=choice(
            data.get("capture_mode"), "capture_mode", tuple(CaptureMode.values), "explicit"
        ),
        source_provider=short_string(data.get("source_provider"), "source_provider", 100),
        mentions=mentions(data.get("mentions")),
        occurred_at=occurred(data.get("occurred_at")),
        expires_at=expires,
        last_confirmed_at=(
            now if last_confirmed is None else parse_timestamp(last_confirmed, "last_confirmed_at")
        ),
        dedup_policy=choice(data.get("dedup_policy"), "dedup_policy", DEDUP_POLICIES, "ask"),
        cas=store_cas,
    )


@dataclass
class UpdateInput:
    """The model fields a PATCH/correction sets (already normalised) and its CAS condition."""

    changes: dict[str, Any] = field(default_factory=dict)
    cas: Cas | None = None


def parse_update(
    data: Any,
    *,
    now: datetime,
    if_match: str | None = None,
    allowed: frozenset[str] = UPDATE_FIELDS,
) -> UpdateInput:
    """Validate a PATCH body: only the fields given are changed."""
    data = require_object(data)
    scan_secrets(data)
    reject_unknown(data, allowed)
    changes: dict[str, Any] = {}
    if "text" in data:
        changes["text"] = text(data["text"])
    if "data" in data:
        changes["data"] = data_object(data["data"])
    if "tags" in data:
        changes["tags"] = tags(data["tags"])
    if "category" in data:
        if data["category"] is None:
            raise InvalidInput("'category' cannot be null", field="category")
        changes["category"] = category(data["category"], default="")
    if "kind" in data:
        changes["kind"] = kind(data["kind"])
    for name, default in (("importance", 0.5), ("confidence", 1.0)):
        if name in data:
            changes[name] = default if data[name] is None else unit_float(data[name], name)
    if "mentions" in data:
        changes["mentions"] = mentions(data["mentions"])
    if "occurred_at" in data:
        changes["occurred_at"] = occurred(data["occurred_at"])
    expires = expiry(data, now=now)
    if expires is not _MISSING:  # what the writer asks for; the effective one is computed
        changes["requested_expires_at"] = expires
    if "last_confirmed_at" in data:
        value = data["last_confirmed_at"]
        changes["last_confirmed_at"] = (
            now if value is None else parse_timestamp(value, "last_confirmed_at")
        )
    if "key" in data:  # operators may re-key; agents cannot (not in UPDATE_FIELDS)
        changes["key"] = memory_key(data["key"])
    return UpdateInput(changes=changes, cas=cas(data, if_match))

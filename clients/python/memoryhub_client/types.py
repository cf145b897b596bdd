"""Typed results: one dataclass per response object of the REST API (docs/api.md).

Every result keeps the JSON it was read from in `raw`, so a field the server adds later is
never lost. Timestamps are aware `datetime`s (UTC).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

T = TypeVar("T")


def parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _build(cls: type[T], obj: dict[str, Any], **extra: Any) -> T:
    """`cls` from a JSON object: its fields by name, `*_at` fields parsed, `raw` kept."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in extra or f.name == "raw" or f.name not in obj:
            continue
        value = obj[f.name]
        values[f.name] = parse_time(value) if f.name.endswith("_at") else value
    return cls(**values, **extra, raw=obj)


@dataclass
class Memory:
    """A memory as the API returns it (its `memory` object)."""

    id: str
    text: str = ""
    key: str | None = None
    category: str = "core"
    kind: str = "fact"
    scope: str = "agent"
    data: dict[str, Any] | None = None
    tags: list[str] = field(default_factory=list)
    subject_id: str | None = None
    thread_id: str | None = None
    importance: float = 0.5
    confidence: float = 1.0
    capture_mode: str = "explicit"
    source_provider: str | None = None
    mentions: list[dict[str, Any]] = field(default_factory=list)
    expires_at: datetime | None = None
    last_confirmed_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    version: int = 1
    status: str = "active"
    review_state: str = "none"
    size_bytes: int = 0
    agent: str | None = None
    source: str | None = None
    evidence: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Memory:
        return _build(cls, obj)


@dataclass
class NearDuplicate:
    memory_id: str
    text: str
    similarity: float
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class PreviouslyCorrected:
    memory_id: str
    text: str
    reason: str
    similarity: float
    tombstoned_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class StoreResult:
    """`POST /memories`: `created` is True for an insert (201), False for an update or skip;
    `action` says which: `created`, `updated`, `replaced` (a single kind's record), `skipped`."""

    memory_id: str
    message: str
    version: int
    memory: Memory | None
    created: bool
    action: str = ""
    near_duplicates: list[NearDuplicate] = field(default_factory=list)
    previously_corrected: list[PreviouslyCorrected] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any], *, created: bool) -> StoreResult:
        memory = obj.get("memory")
        return _build(
            cls,
            obj,
            created=created,
            memory=Memory.from_json(memory) if memory else None,
            near_duplicates=[_build(NearDuplicate, d) for d in obj.get("near_duplicates") or []],
            previously_corrected=[
                _build(PreviouslyCorrected, d) for d in obj.get("previously_corrected") or []
            ],
        )


@dataclass
class ForgetResult:
    deleted: bool
    memory_id: str | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Page:
    """One page of a list walk; `next_cursor` is None on the last page. `as_of` (memory lists):
    the walk's horizon; a later sync asks `updated_after=as_of` and misses no write."""

    items: list[Any]
    next_cursor: str | None
    as_of: str | None = None


@dataclass
class SearchHit:
    """One search result in the LLM-facing format; `text` is `data["text"]`."""

    id: str
    key: str | None
    kind: str
    category: str
    quality: dict[str, float]
    data: dict[str, Any]
    context: dict[str, Any]
    source: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def text(self) -> str:
        return str(self.data.get("text", ""))

    @property
    def relevance(self) -> float:
        return float(self.quality.get("relevance", 0.0))

    @property
    def is_latest(self) -> bool:
        return bool(self.context.get("isLatest", True))


@dataclass
class SearchResult:
    """`POST /search`; iterate it for the hits, best first."""

    memories: list[SearchHit]
    searched_at: datetime | None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    def __iter__(self) -> Iterator[SearchHit]:
        return iter(self.memories)

    def __len__(self) -> int:
        return len(self.memories)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SearchResult:
        return cls(
            memories=[_build(SearchHit, hit) for hit in obj.get("memories") or []],
            searched_at=parse_time(obj.get("searchedAt")),
            raw=obj,
        )


@dataclass
class HydrateEntry(Memory):
    """A hydrated memory and why it was loaded: `core` or `recent`."""

    reason: str = "recent"

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HydrateEntry:
        return _build(cls, obj)


@dataclass
class ArchivalMatch(Memory):
    """An archival memory matching hydrate's query, outside the budget."""

    score: float = 0.0

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ArchivalMatch:
        return _build(cls, obj)


@dataclass
class Kind:
    """A kind of the tenant's registry."""

    name: str
    cardinality: str = "multiple"
    memory_type: str = "semantic"
    description: str = ""
    schema: dict[str, Any] | None = None
    default_category: str | None = None
    tool: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class HydrateResult:
    """`POST /hydrate`; `markdown` is set when asked with `format="markdown"`."""

    entries: list[HydrateEntry]
    bytes_used: int
    budget_bytes: int
    archival: list[ArchivalMatch] = field(default_factory=list)
    markdown: str | None = None
    omitted: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> HydrateResult:
        return _build(
            cls,
            obj,
            entries=[HydrateEntry.from_json(e) for e in obj.get("entries") or []],
            archival=[ArchivalMatch.from_json(m) for m in obj.get("archival") or []],
        )


@dataclass
class IngestResult:
    """`POST /threads/{id}/messages` (202)."""

    thread_id: str
    accepted: int
    duplicates: int
    redacted: int
    extraction: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Thread:
    """`GET /threads/{id}`: the stored conversation and its extraction state."""

    thread_id: str
    subject_id: str | None = None
    message_count: int = 0
    summary: str = ""
    last_message_at: datetime | None = None
    ended_at: datetime | None = None
    extraction: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Message:
    seq: int
    role: str
    content: str
    name: str | None = None
    created_at: datetime | None = None
    redactions: list[Any] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ExtractResult:
    """`POST /threads/{id}/extract` (202): the thread's `extraction` object."""

    thread_id: str
    extraction: dict[str, Any]
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class ErasureResult:
    """`DELETE /subjects/{id}`: what this call changed."""

    subject_id: str
    memories: int
    threads: int
    messages: int
    purged: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class Event:
    """One event of the change feed, also a webhook delivery's body: `id` is
    monotonic, `data` the public memory object as of the change (or a run's / erasure's
    summary)."""

    id: int
    type: str
    tenant: str = ""
    agent: str | None = None
    subject_id: str | None = None
    memory_id: str | None = None
    version: int | None = None
    occurred_at: datetime | None = None
    data: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class FeedPage:
    """One page of the change feed; `next_cursor` is never None (also on an empty page: poll
    again from it)."""

    items: list[Event]
    next_cursor: str


@dataclass
class Webhook:
    """A webhook endpoint of the tenant; its secret is never shown again."""

    id: str
    url: str
    events: list[str] = field(default_factory=list)  # []: every type
    description: str = ""
    enabled: bool = True
    created_at: datetime | None = None
    failing_since: datetime | None = None
    last_success_at: datetime | None = None
    disabled_at: datetime | None = None
    disabled_reason: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass
class WebhookCreated:
    """`POST /webhooks`: the endpoint and its signing `secret`, shown this once."""

    webhook: Webhook
    secret: str
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> WebhookCreated:
        return _build(cls, obj, webhook=_build(Webhook, obj["webhook"]))


@dataclass
class ApiIndex:
    """`GET /api/v1/` (no key needed): the endpoints (`{"method", "path", "summary"}`), how to
    authenticate, and the URLs of the docs, the OpenAPI schema and MCP."""

    name: str
    version: str
    authentication: str = ""
    docs: str = ""
    schema: str = ""
    mcp: str = ""
    endpoints: list[dict[str, str]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def build(cls: type[T], obj: dict[str, Any]) -> T:
    """A result dataclass from its JSON object (public alias of the field mapper)."""
    return _build(cls, obj)

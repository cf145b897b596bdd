"""What the sync and async clients share: each endpoint as a `Call` (method, path, query,
body, how to read the answer), the retry rule, and the keyword arguments of every endpoint
(named exactly as the REST fields).

The clients only send calls: `MemoryHub._send` and `AsyncMemoryHub._send` are the one place
each of them loops over attempts, so the two cannot drift apart.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote

import httpx

from memoryhub_client.errors import (
    ERRORS_BY_CODE,
    MemoryHubConnectionError,
    error_from_response,
    parse_retry_after,
)
from memoryhub_client.types import (
    ApiIndex,
    ErasureResult,
    Event,
    ExtractResult,
    FeedPage,
    ForgetResult,
    HydrateResult,
    IngestResult,
    Kind,
    Memory,
    Message,
    Page,
    SearchResult,
    StoreResult,
    Thread,
    Webhook,
    WebhookCreated,
    build,
)

T = TypeVar("T")
API = "/api/v1"
VERSION = "0.1.0"


class StoreFields(TypedDict, total=False):
    """`POST /memories` body fields besides `text`. An explicit None is sent as
    JSON null (`expires_at=None`: never expires; `expected_updated_at=None`: create only)."""

    key: str
    category: str
    kind: str
    scope: Literal["agent", "user"]
    data: dict[str, Any]
    tags: list[str]
    subject_id: str
    thread_id: str
    session_id: str
    importance: float
    confidence: float
    capture_mode: Literal["explicit", "inferred"]
    source_provider: str
    mentions: list[dict[str, Any]]
    occurred_at: str | int
    ttl: str
    expires_at: str | int | None
    last_confirmed_at: str
    dedup_policy: Literal["ask", "skip_if_near", "insert"]
    expected_version: int
    expected_updated_at: str | None


class UpdateFields(TypedDict, total=False):
    """`PATCH /memories/{id}` body fields (only those given change)."""

    text: str
    data: dict[str, Any] | None
    tags: list[str]
    category: str
    kind: str
    importance: float
    confidence: float
    mentions: list[dict[str, Any]]
    ttl: str
    expires_at: str | int | None
    last_confirmed_at: str
    expected_version: int
    expected_updated_at: str


class ListFilters(TypedDict, total=False):
    """`GET /memories` filters; `tag` may be a list (all must be present)."""

    category: str
    kind: str
    tag: str | list[str]
    subject_id: str
    thread_id: str
    key_prefix: str
    updated_after: str
    include_shared: bool
    limit: int


class SearchFields(TypedDict, total=False):
    """`POST /search` body fields besides `query`."""

    mode: Literal["hybrid", "semantic", "keyword"]
    limit: int
    min_score: float
    category: str
    categories: list[str]
    kind: str
    tags: list[str]
    subject_id: str
    thread_id: str
    session_id: str
    include_shared: bool
    include_history: bool
    key_prefix: str


class HydrateFields(TypedDict, total=False):
    """`POST /hydrate` body fields."""

    subject_id: str
    thread_id: str
    session_id: str
    budget_bytes: int
    query: str
    archival_mode: Literal["tool_only", "auto", "off"]
    archival_limit: int
    archival_min_score: float
    include_agent_core: bool
    include_user_core: bool
    format: Literal["json", "markdown"]
    explain: bool


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before trying a request again.

    Retried: connection errors and timeouts, `429 RATE_LIMITED` and `503` (never
    `429 QUOTA_EXCEEDED`: waiting does not relieve a quota). The wait is the server's
    `Retry-After` when it sends one (at most `max_retry_after`), else exponential back-off
    `backoff * 2**attempt` capped at `max_backoff`, with full jitter unless `jitter=False`.
    Every POST carries an `Idempotency-Key`, the same on each attempt, so a retried write
    happens once.
    """

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 8.0
    max_retry_after: float = 60.0
    jitter: bool = True

    def delay(self, attempt: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before attempt `attempt + 1`, or None: do not retry. `response` is
        None after a connection error."""
        if attempt >= self.retries:
            return None
        if response is not None:
            if not _retryable(response):
                return None
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            if retry_after is not None:
                return min(retry_after, self.max_retry_after)
        wait = min(self.backoff * 2**attempt, self.max_backoff)
        return random.uniform(0, wait) if self.jitter else wait


def _retryable(response: httpx.Response) -> bool:
    if response.status_code == 503:
        return True
    if response.status_code != 429:
        return False
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return True  # a 429 from something in front of MemoryHub: a rate limit
    return code == "RATE_LIMITED" or code not in ERRORS_BY_CODE


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its successful answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    params: Mapping[str, Any] | None = None
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"headers": self.headers}
        if self.params:
            kwargs["params"] = _query(self.params)
        if self.body is not None:
            kwargs["json"] = self.body
        return kwargs


def _query(params: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            value = "true" if value else "false"
        out[name] = value
    return out


def segment(value: str) -> str:
    """A key, thread or subject id as one URL path segment (`/` and `%` included)."""
    return quote(value, safe="")


def _post(
    path: str,
    body: Any,
    read: Callable[[httpx.Response], T],
    key: str | None,
    params: Mapping[str, Any] | None = None,
) -> Call[T]:
    # The key is made once per call, so every retry of it carries the same one.
    headers = {"Idempotency-Key": key or uuid.uuid4().hex}
    return Call("POST", path, read, params=params, body=body, headers=headers)


def _json(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    if not isinstance(body, dict):
        raise ValueError("MemoryHub answered JSON that is not an object")
    return body


def _memory(response: httpx.Response) -> Memory:
    return Memory.from_json(_json(response)["memory"])


def _forget_result(response: httpx.Response) -> ForgetResult:
    return build(ForgetResult, _json(response))


# --- the endpoints -------------------------------------------------------------------------


def store(text: str | None, fields: Mapping[str, Any], key: str | None) -> Call[StoreResult]:
    body = dict(fields)
    if text is not None:
        body["text"] = text
    return _post(
        f"{API}/memories",
        body,
        lambda r: StoreResult.from_json(_json(r), created=r.status_code == 201),
        key,
    )


def get(memory_id: str, subject_id: str | None) -> Call[Memory]:
    path = f"{API}/memories/{segment(memory_id)}"
    return Call("GET", path, _memory, params={"subject_id": subject_id})


def recall(key: str, subject_id: str | None) -> Call[Memory | None]:
    def read(response: httpx.Response) -> Memory | None:
        memory = _json(response)["memory"]
        return Memory.from_json(memory) if memory else None

    path = f"{API}/memories/by-key/{segment(key)}"
    return Call("GET", path, read, params={"subject_id": subject_id})


def list_page(filters: Mapping[str, Any], cursor: str | None) -> Call[Page]:
    def read(response: httpx.Response) -> Page:
        body = _json(response)
        memories = [Memory.from_json(m) for m in body["memories"]]
        return Page(items=memories, next_cursor=body.get("next_cursor"), as_of=body.get("as_of"))

    return Call("GET", f"{API}/memories", read, params={**filters, "cursor": cursor})


def keys(subject_id: str | None, category: str | None, key_prefix: str | None) -> Call[list[str]]:
    params = {"subject_id": subject_id, "category": category, "key_prefix": key_prefix}
    return Call("GET", f"{API}/keys", lambda r: list(_json(r)["keys"]), params=params)


def update(
    memory_id: str, fields: Mapping[str, Any], subject_id: str | None, if_match: int | None
) -> Call[Memory]:
    headers = {} if if_match is None else {"If-Match": f'"{if_match}"'}
    path = f"{API}/memories/{segment(memory_id)}"
    return Call(
        "PATCH",
        path,
        _memory,
        params={"subject_id": subject_id},
        body=dict(fields),
        headers=headers,
    )


def confirm(memory_id: str, subject_id: str | None, key: str | None) -> Call[Memory]:
    path = f"{API}/memories/{segment(memory_id)}/confirm"
    return _post(path, None, _memory, key, {"subject_id": subject_id})


def forget(
    memory_id: str | None, key: str | None, subject_id: str | None, reason: str | None, purge: bool
) -> Call[ForgetResult]:
    if (memory_id is None) == (key is None):
        raise ValueError("forget() takes memory_id or key (one of them)")
    path = (
        f"{API}/memories/{segment(memory_id)}"
        if memory_id is not None
        else f"{API}/memories/by-key/{segment(key or '')}"
    )
    params = {"subject_id": subject_id, "reason": reason or None, "purge": purge or None}
    return Call("DELETE", path, _forget_result, params=params)


def search(query: str, fields: Mapping[str, Any], key: str | None) -> Call[SearchResult]:
    body = {"query": query, **fields}
    return _post(f"{API}/search", body, lambda r: SearchResult.from_json(_json(r)), key)


def hydrate(fields: Mapping[str, Any], key: str | None) -> Call[HydrateResult]:
    return _post(f"{API}/hydrate", dict(fields), lambda r: HydrateResult.from_json(_json(r)), key)


def export_markdown(
    subject_id: str | None, category: str | None, include_tombstoned: bool
) -> Call[str]:
    params = {
        "subject_id": subject_id,
        "category": category,
        "include_tombstoned": include_tombstoned or None,
    }
    return Call("GET", f"{API}/export.md", lambda r: r.text, params=params)


def add_messages(
    thread_id: str,
    messages: list[dict[str, Any]],
    subject_id: str | None,
    extract: str | None,
    key: str | None,
) -> Call[IngestResult]:
    body: dict[str, Any] = {"messages": messages}
    if subject_id is not None:
        body["subject_id"] = subject_id
    if extract is not None:
        body["extract"] = extract
    path = f"{API}/threads/{segment(thread_id)}/messages"
    return _post(path, body, lambda r: build(IngestResult, _json(r)), key)


def get_thread(thread_id: str, subject_id: str | None) -> Call[Thread]:
    path = f"{API}/threads/{segment(thread_id)}"
    read: Callable[[httpx.Response], Thread] = lambda r: build(Thread, _json(r)["thread"])  # noqa: E731
    return Call("GET", path, read, params={"subject_id": subject_id})


def messages_page(
    thread_id: str, subject_id: str | None, limit: int | None, cursor: str | None
) -> Call[Page]:
    def read(response: httpx.Response) -> Page:
        body = _json(response)
        return Page([build(Message, m) for m in body["messages"]], body.get("next_cursor"))

    path = f"{API}/threads/{segment(thread_id)}/messages"
    params = {"subject_id": subject_id, "limit": limit, "cursor": cursor}
    return Call("GET", path, read, params=params)


def extract(thread_id: str, subject_id: str | None, key: str | None) -> Call[ExtractResult]:
    path = f"{API}/threads/{segment(thread_id)}/extract"
    read = lambda r: build(ExtractResult, _json(r))  # noqa: E731
    return _post(path, None, read, key, {"subject_id": subject_id})


def end_thread(thread_id: str, subject_id: str | None, key: str | None) -> Call[int]:
    path = f"{API}/threads/{segment(thread_id)}/end"
    return _post(path, None, lambda r: int(_json(r)["removed"]), key, {"subject_id": subject_id})


def erase_subject(subject_id: str, purge: bool) -> Call[ErasureResult]:
    path = f"{API}/subjects/{segment(subject_id)}"
    read: Callable[[httpx.Response], ErasureResult] = lambda r: build(ErasureResult, _json(r))  # noqa: E731
    return Call("DELETE", path, read, params={"purge": purge or None})


class KindFields(TypedDict, total=False):
    """`PUT /kinds/{name}` body fields: the whole definition (omitted ones take defaults)."""

    cardinality: Literal["single", "multiple"]
    memory_type: Literal["semantic", "episodic", "procedural"]
    description: str
    schema: dict[str, Any] | None
    default_category: str | None


def kinds() -> Call[list[Kind]]:
    read = lambda r: [build(Kind, k) for k in _json(r)["kinds"]]  # noqa: E731
    return Call("GET", f"{API}/kinds", read)


def put_kind(name: str, fields: Mapping[str, Any]) -> Call[Kind]:
    # A PUT replaces the whole definition: sent again, it answers the same.
    read = lambda r: build(Kind, _json(r)["kind"])  # noqa: E731
    return Call("PUT", f"{API}/kinds/{segment(name)}", read, body=dict(fields))


def delete_kind(name: str) -> Call[bool]:
    read = lambda r: bool(_json(r)["deleted"])  # noqa: E731
    return Call("DELETE", f"{API}/kinds/{segment(name)}", read)


def get_kind(name: str) -> Call[Kind]:
    read = lambda r: build(Kind, _json(r)["kind"])  # noqa: E731
    return Call("GET", f"{API}/kinds/{segment(name)}", read)


# --- events and webhooks ---------------------------------------------------------------------

# The page size `events()` asks for when given no `limit` (the API's own default). It is sent,
# so a shorter page proves the walk reached the present.
EVENTS_PAGE_SIZE = 100


class EventsFilters(TypedDict, total=False):
    """`GET /events` filters (`limit` is the page size, 1-1000)."""

    types: str | list[str]
    subject_id: str
    include_shared: bool
    limit: int


def events_page(filters: Mapping[str, Any], after: str | None) -> Call[FeedPage]:
    def read(response: httpx.Response) -> FeedPage:
        body = _json(response)
        return FeedPage([build(Event, e) for e in body["events"]], body["next_cursor"])

    params = {**filters, "after": after}
    types = params.get("types")
    if isinstance(types, list | tuple):
        params["types"] = ",".join(types) or None
    return Call("GET", f"{API}/events", read, params=params)


def webhooks() -> Call[list[Webhook]]:
    read = lambda r: [build(Webhook, w) for w in _json(r)["webhooks"]]  # noqa: E731
    return Call("GET", f"{API}/webhooks", read)


def create_webhook(
    url: str, events: list[str] | None, description: str | None, key: str | None
) -> Call[WebhookCreated]:
    body: dict[str, Any] = {"url": url}
    if events is not None:
        body["events"] = events
    if description is not None:
        body["description"] = description
    return _post(f"{API}/webhooks", body, lambda r: WebhookCreated.from_json(_json(r)), key)


def delete_webhook(webhook_id: str) -> Call[bool]:
    read = lambda r: bool(_json(r)["deleted"])  # noqa: E731
    return Call("DELETE", f"{API}/webhooks/{segment(webhook_id)}", read)


def api_index() -> Call[ApiIndex]:
    return Call("GET", f"{API}/", lambda r: build(ApiIndex, _json(r)))


def whoami() -> Call[dict[str, Any]]:
    return Call("GET", f"{API}/whoami", _json)


def auth_headers(api_key: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json",
        "User-Agent": f"memoryhub-client/{VERSION}",
    }


def wait_or_raise(
    policy: RetryPolicy,
    attempt: int,
    response: httpx.Response | None = None,
    error: httpx.TransportError | None = None,
) -> float:
    """After a failed attempt: the seconds to wait before the next one, or the exception to
    give the caller (the error code's class, or `MemoryHubConnectionError`)."""
    wait = policy.delay(attempt, response)
    if wait is not None:
        return wait
    if response is None:
        raise MemoryHubConnectionError(
            f"No answer from MemoryHub after {attempt + 1} attempts ({type(error).__name__})"
        ) from error
    raise error_from_response(response)

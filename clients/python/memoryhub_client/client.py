"""`MemoryHub`: the synchronous client (one method per REST endpoint)."""

from __future__ import annotations

import builtins
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, TypeVar, Unpack

import httpx

import memoryhub_client._core as _core
from memoryhub_client._core import (
    EVENTS_PAGE_SIZE,
    EventsFilters,
    HydrateFields,
    KindFields,
    ListFilters,
    RetryPolicy,
    SearchFields,
    StoreFields,
    UpdateFields,
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
)

T = TypeVar("T")


def _walk(fetch: Callable[[str | None], Page]) -> Iterator[Any]:
    """The items of every page, fetching the next page only when the last one is used up."""
    cursor: str | None = None
    while True:
        page = fetch(cursor)
        yield from page.items
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class EventFeed:
    """The change feed from a cursor to the present, page by page as you iterate:

        feed = hub.events(after=saved)
        for event in feed:
            apply(event)
        saved = feed.cursor  # poll again later from here

    The walk ends at a page shorter than the page size (the feed had nothing more then).
    `cursor` moves past a page only when the item after its last one is asked for (or the walk
    ends), so after a `break` or an exception in your loop, polling again from `cursor` gives
    that page again (at least once), never skips it. Each iteration walks from `after` again.
    """

    def __init__(
        self, fetch: Callable[[str | None], FeedPage], after: str | None, page_size: int
    ) -> None:
        self._fetch, self._after, self._page_size = fetch, after, page_size
        self.cursor = after

    def pages(self) -> Iterator[FeedPage]:
        cursor = self._after
        while True:
            page = self._fetch(cursor)
            yield page
            self.cursor = page.next_cursor
            if len(page.items) < self._page_size:
                return
            cursor = page.next_cursor

    def __iter__(self) -> Iterator[Event]:
        for page in self.pages():
            yield from page.items


class MemoryHub:
    """A MemoryHub agent API client.

    `url` is the server's base URL (`http://127.0.0.1:8000`), `api_key` an agent's key
    (`mh_…`). Requests time out after `timeout` seconds; connection errors, `429 RATE_LIMITED`
    and `503` are retried by `retry` (see `RetryPolicy`), waiting with `sleep` (injectable for
    tests). Every POST carries an `Idempotency-Key` (yours, or a fresh one per call), so a
    retried write happens once. Errors raise the `MemoryHubError` subclass of their code.
    Use it as a context manager, or call `close()`.
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = 10.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        http_client: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = http_client or httpx.Client(timeout=timeout)
        self._http.base_url = httpx.URL(self.url)
        self._http.headers.update(_core.auth_headers(api_key))

    def __enter__(self) -> MemoryHub:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: _core.Call[T]) -> T:
        for attempt in itertools.count():
            try:
                response = self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                self._sleep(_core.wait_or_raise(self.retry, attempt, error=exc))
                continue
            if response.is_success:
                return call.read(response)
            self._sleep(_core.wait_or_raise(self.retry, attempt, response))
        raise AssertionError("unreachable")

    # --- memories ------------------------------------------------------------------------

    def store(
        self,
        text: str | None = None,
        *,
        idempotency_key: str | None = None,
        **fields: Unpack[StoreFields],
    ) -> StoreResult:
        """Store a memory (`POST /memories`): a keyed upsert with `key`, compare-and-set with
        `expected_version`, dedup by `dedup_policy` without a key."""
        return self._send(_core.store(text, fields, idempotency_key))

    def get(self, memory_id: str, *, subject_id: str | None = None) -> Memory:
        """One memory by id; `NotFoundError` when it does not exist or is not visible."""
        return self._send(_core.get(memory_id, subject_id))

    def recall(self, key: str, *, subject_id: str | None = None) -> Memory | None:
        """The live memory stored under `key`, or None."""
        return self._send(_core.recall(key, subject_id))

    def list(self, **filters: Unpack[ListFilters]) -> Iterator[Memory]:
        """Every visible memory matching the filters, newest `updated_at` first, walking the
        cursor page by page (`limit` is the page size) as you iterate."""
        return _walk(lambda cursor: self.list_page(cursor=cursor, **filters))

    def list_page(self, *, cursor: str | None = None, **filters: Unpack[ListFilters]) -> Page:
        """One page of `GET /memories` (`items`, `next_cursor`)."""
        return self._send(_core.list_page(filters, cursor))

    def keys(
        self,
        *,
        subject_id: str | None = None,
        category: str | None = None,
        key_prefix: str | None = None,
    ) -> builtins.list[str]:
        """The sorted distinct keys of the visible live memories."""
        return self._send(_core.keys(subject_id, category, key_prefix))

    def update(
        self,
        memory_id: str,
        *,
        subject_id: str | None = None,
        if_match: int | None = None,
        **fields: Unpack[UpdateFields],
    ) -> Memory:
        """Change the given fields (`PATCH /memories/{id}`); `if_match`/`expected_version`
        make it compare-and-set (`ConflictError.current_version`)."""
        return self._send(_core.update(memory_id, fields, subject_id, if_match))

    def confirm(
        self, memory_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> Memory:
        """Re-confirm a fact: `last_confirmed_at` becomes now."""
        return self._send(_core.confirm(memory_id, subject_id, idempotency_key))

    def forget(
        self,
        memory_id: str | None = None,
        *,
        key: str | None = None,
        subject_id: str | None = None,
        reason: str | None = None,
        purge: bool = False,
    ) -> ForgetResult:
        """Forget by id or by `key`: tombstoned with `reason`; `purge=True` erases (admin)."""
        return self._send(_core.forget(memory_id, key, subject_id, reason, purge))

    def search(
        self, query: str, *, idempotency_key: str | None = None, **fields: Unpack[SearchFields]
    ) -> SearchResult:
        """Ranked hits in the LLM-facing format (`POST /search`); iterate the result."""
        return self._send(_core.search(query, fields, idempotency_key))

    def hydrate(
        self, *, idempotency_key: str | None = None, **fields: Unpack[HydrateFields]
    ) -> HydrateResult:
        """What to load at the start of a run; `format="markdown"` fills `.markdown`."""
        return self._send(_core.hydrate(fields, idempotency_key))

    def export_markdown(
        self,
        *,
        subject_id: str | None = None,
        category: str | None = None,
        include_tombstoned: bool = False,
    ) -> str:
        """The agent's live memories as one Markdown document (`GET /export.md`)."""
        return self._send(_core.export_markdown(subject_id, category, include_tombstoned))

    # --- conversations ---------------------------------------------------------------------

    def add_messages(
        self,
        thread_id: str,
        messages: builtins.list[dict[str, Any]],
        *,
        subject_id: str | None = None,
        extract: Literal["auto", "now", "off"] | None = None,
        idempotency_key: str | None = None,
    ) -> IngestResult:
        """Hand over messages (`{"role", "content", "name"?, "created_at"?}`, 1–100)."""
        call = _core.add_messages(thread_id, messages, subject_id, extract, idempotency_key)
        return self._send(call)

    def get_thread(self, thread_id: str, *, subject_id: str | None = None) -> Thread:
        """The thread and its extraction state."""
        return self._send(_core.get_thread(thread_id, subject_id))

    def messages(
        self, thread_id: str, *, subject_id: str | None = None, limit: int | None = None
    ) -> Iterator[Message]:
        """Every message of the thread in `seq` order, page by page as you iterate."""
        return _walk(
            lambda cursor: self._send(_core.messages_page(thread_id, subject_id, limit, cursor))
        )

    def extract(
        self, thread_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> ExtractResult:
        """Queue an extraction of the thread now."""
        return self._send(_core.extract(thread_id, subject_id, idempotency_key))

    def end_thread(
        self, thread_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> int:
        """End a run; returns how many `conversation` memories were removed."""
        return self._send(_core.end_thread(thread_id, subject_id, idempotency_key))

    def erase_subject(self, subject_id: str, *, purge: bool = False) -> ErasureResult:
        """Erase an end user (admin scope): tombstone, or with `purge=True` purge."""
        return self._send(_core.erase_subject(subject_id, purge))

    def kinds(self) -> list[Kind]:
        """The tenant's kinds."""
        return self._send(_core.kinds())

    def put_kind(self, name: str, **fields: Unpack[KindFields]) -> Kind:
        """Define or redefine a kind (admin scope): the whole definition, e.g.
        `put_kind("UserProfile", cardinality="single", schema={...})`."""
        return self._send(_core.put_kind(name, fields))

    def delete_kind(self, name: str) -> bool:
        """Delete a kind (admin scope); `ConflictError` while live memories use it."""
        return self._send(_core.delete_kind(name))

    def get_kind(self, name: str) -> Kind:
        """One kind by name; `NotFoundError` for a name the tenant has not registered."""
        return self._send(_core.get_kind(name))

    # --- events and webhooks ---------------------------------------------------------------

    def events(self, *, after: str | None = None, **filters: Unpack[EventsFilters]) -> EventFeed:
        """The change feed after the cursor `after`, oldest first, to the present, following
        the cursor as you iterate (`limit` is the page size, default 100); the feed's `cursor`
        is where to poll from next. `types` filters by event type (a list or comma-separated)."""
        size = filters.get("limit") or EVENTS_PAGE_SIZE
        fetch = lambda cursor: self.events_page(after=cursor, **{**filters, "limit": size})  # noqa: E731
        return EventFeed(fetch, after, size)

    def events_page(
        self, *, after: str | None = None, **filters: Unpack[EventsFilters]
    ) -> FeedPage:
        """One page of `GET /events` (`items`, `next_cursor`: also on an empty page)."""
        return self._send(_core.events_page(filters, after))

    def webhooks(self) -> builtins.list[Webhook]:
        """The tenant's webhook endpoints (admin scope)."""
        return self._send(_core.webhooks())

    def create_webhook(
        self,
        url: str,
        *,
        events: builtins.list[str] | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> WebhookCreated:
        """Add a webhook endpoint (admin scope): `url` https:// with a public address, `events`
        the types to send (default: all). The `secret` that signs deliveries is shown once."""
        call = _core.create_webhook(url, events, description, idempotency_key)
        return self._send(call)

    def delete_webhook(self, webhook_id: str) -> bool:
        """Delete a webhook endpoint and its delivery log (admin scope)."""
        return self._send(_core.delete_webhook(webhook_id))

    def api_index(self) -> ApiIndex:
        """The API's table of contents (`GET /api/v1/`, no key needed)."""
        return self._send(_core.api_index())

    def whoami(self) -> dict[str, Any]:
        """The key's tenant, agent, scopes and bound subject."""
        return self._send(_core.whoami())

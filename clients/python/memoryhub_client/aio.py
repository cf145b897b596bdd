"""`AsyncMemoryHub`: the asyncio client, method for method the same as `MemoryHub`."""

from __future__ import annotations

import asyncio
import builtins
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
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


async def _walk(fetch: Callable[[str | None], Awaitable[Page]]) -> AsyncIterator[Any]:
    cursor: str | None = None
    while True:
        page = await fetch(cursor)
        for item in page.items:
            yield item
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class AsyncEventFeed:
    """The asyncio twin of `EventFeed` (`async for event in feed`; `feed.cursor`)."""

    def __init__(
        self, fetch: Callable[[str | None], Awaitable[FeedPage]], after: str | None, page_size: int
    ) -> None:
        self._fetch, self._after, self._page_size = fetch, after, page_size
        self.cursor = after

    async def pages(self) -> AsyncIterator[FeedPage]:
        cursor = self._after
        while True:
            page = await self._fetch(cursor)
            yield page
            self.cursor = page.next_cursor
            if len(page.items) < self._page_size:
                return
            cursor = page.next_cursor

    async def _items(self) -> AsyncIterator[Event]:
        async for page in self.pages():
            for item in page.items:
                yield item

    def __aiter__(self) -> AsyncIterator[Event]:
        return self._items()


class AsyncMemoryHub:
    """The asyncio twin of `MemoryHub` (same arguments, same methods, awaited; `list()` and
    `messages()` are async iterators). `sleep` is awaited between retries."""

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float | httpx.Timeout = 10.0,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._http.base_url = httpx.URL(self.url)
        self._http.headers.update(_core.auth_headers(api_key))

    async def __aenter__(self) -> AsyncMemoryHub:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, call: _core.Call[T]) -> T:
        for attempt in itertools.count():
            try:
                response = await self._http.request(call.method, call.path, **call.request_kwargs())
            except httpx.TransportError as exc:
                await self._sleep(_core.wait_or_raise(self.retry, attempt, error=exc))
                continue
            if response.is_success:
                return call.read(response)
            await self._sleep(_core.wait_or_raise(self.retry, attempt, response))
        raise AssertionError("unreachable")

    async def store(
        self,
        text: str | None = None,
        *,
        idempotency_key: str | None = None,
        **fields: Unpack[StoreFields],
    ) -> StoreResult:
        """See `MemoryHub.store`."""
        return await self._send(_core.store(text, fields, idempotency_key))

    async def get(self, memory_id: str, *, subject_id: str | None = None) -> Memory:
        return await self._send(_core.get(memory_id, subject_id))

    async def recall(self, key: str, *, subject_id: str | None = None) -> Memory | None:
        return await self._send(_core.recall(key, subject_id))

    def list(self, **filters: Unpack[ListFilters]) -> AsyncIterator[Memory]:
        """`async for memory in hub.list(...)`: every page, fetched as you iterate."""
        return _walk(lambda cursor: self.list_page(cursor=cursor, **filters))

    async def list_page(self, *, cursor: str | None = None, **filters: Unpack[ListFilters]) -> Page:
        return await self._send(_core.list_page(filters, cursor))

    async def keys(
        self,
        *,
        subject_id: str | None = None,
        category: str | None = None,
        key_prefix: str | None = None,
    ) -> builtins.list[str]:
        return await self._send(_core.keys(subject_id, category, key_prefix))

    async def update(
        self,
        memory_id: str,
        *,
        subject_id: str | None = None,
        if_match: int | None = None,
        **fields: Unpack[UpdateFields],
    ) -> Memory:
        return await self._send(_core.update(memory_id, fields, subject_id, if_match))

    async def confirm(
        self, memory_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> Memory:
        return await self._send(_core.confirm(memory_id, subject_id, idempotency_key))

    async def forget(
        self,
        memory_id: str | None = None,
        *,
        key: str | None = None,
        subject_id: str | None = None,
        reason: str | None = None,
        purge: bool = False,
    ) -> ForgetResult:
        return await self._send(_core.forget(memory_id, key, subject_id, reason, purge))

    async def search(
        self, query: str, *, idempotency_key: str | None = None, **fields: Unpack[SearchFields]
    ) -> SearchResult:
        return await self._send(_core.search(query, fields, idempotency_key))

    async def hydrate(
        self, *, idempotency_key: str | None = None, **fields: Unpack[HydrateFields]
    ) -> HydrateResult:
        return await self._send(_core.hydrate(fields, idempotency_key))

    async def export_markdown(
        self,
        *,
        subject_id: str | None = None,
        category: str | None = None,
        include_tombstoned: bool = False,
    ) -> str:
        return await self._send(_core.export_markdown(subject_id, category, include_tombstoned))

    async def add_messages(
        self,
        thread_id: str,
        messages: builtins.list[dict[str, Any]],
        *,
        subject_id: str | None = None,
        extract: Literal["auto", "now", "off"] | None = None,
        idempotency_key: str | None = None,
    ) -> IngestResult:
        call = _core.add_messages(thread_id, messages, subject_id, extract, idempotency_key)
        return await self._send(call)

    async def get_thread(self, thread_id: str, *, subject_id: str | None = None) -> Thread:
        return await self._send(_core.get_thread(thread_id, subject_id))

    def messages(
        self, thread_id: str, *, subject_id: str | None = None, limit: int | None = None
    ) -> AsyncIterator[Message]:
        return _walk(
            lambda cursor: self._send(_core.messages_page(thread_id, subject_id, limit, cursor))
        )

    async def extract(
        self, thread_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> ExtractResult:
        return await self._send(_core.extract(thread_id, subject_id, idempotency_key))

    async def end_thread(
        self, thread_id: str, *, subject_id: str | None = None, idempotency_key: str | None = None
    ) -> int:
        return await self._send(_core.end_thread(thread_id, subject_id, idempotency_key))

    async def erase_subject(self, subject_id: str, *, purge: bool = False) -> ErasureResult:
        return await self._send(_core.erase_subject(subject_id, purge))

    async def kinds(self) -> list[Kind]:
        """The tenant's kinds."""
        return await self._send(_core.kinds())

    async def put_kind(self, name: str, **fields: Unpack[KindFields]) -> Kind:
        """Define or redefine a kind (admin scope): the whole definition, e.g.
        `put_kind("UserProfile", cardinality="single", schema={...})`."""
        return await self._send(_core.put_kind(name, fields))

    async def delete_kind(self, name: str) -> bool:
        """Delete a kind (admin scope); `ConflictError` while live memories use it."""
        return await self._send(_core.delete_kind(name))

    async def get_kind(self, name: str) -> Kind:
        return await self._send(_core.get_kind(name))

    def events(
        self, *, after: str | None = None, **filters: Unpack[EventsFilters]
    ) -> AsyncEventFeed:
        """See `MemoryHub.events`: `async for event in hub.events(after=saved)`."""
        size = filters.get("limit") or EVENTS_PAGE_SIZE
        fetch = lambda cursor: self.events_page(after=cursor, **{**filters, "limit": size})  # noqa: E731
        return AsyncEventFeed(fetch, after, size)

    async def events_page(
        self, *, after: str | None = None, **filters: Unpack[EventsFilters]
    ) -> FeedPage:
        return await self._send(_core.events_page(filters, after))

    async def webhooks(self) -> builtins.list[Webhook]:
        return await self._send(_core.webhooks())

    async def create_webhook(
        self,
        url: str,
        *,
        events: builtins.list[str] | None = None,
        description: str | None = None,
        idempotency_key: str | None = None,
    ) -> WebhookCreated:
        call = _core.create_webhook(url, events, description, idempotency_key)
        return await self._send(call)

    async def delete_webhook(self, webhook_id: str) -> bool:
        return await self._send(_core.delete_webhook(webhook_id))

    async def api_index(self) -> ApiIndex:
        return await self._send(_core.api_index())

    async def whoami(self) -> dict[str, Any]:
        return await self._send(_core.whoami())

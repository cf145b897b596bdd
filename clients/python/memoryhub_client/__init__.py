"""memoryhub-client: the Python client for MemoryHub's agent API (clients/python/README.md).

    from memoryhub_client import MemoryHub

    with MemoryHub("http://127.0.0.1:8000", api_key) as hub:
        hub.store("Prefers answers in French", key="pref.language", subject_id="u-42")
        print(hub.hydrate(subject_id="u-42", format="markdown").markdown)

`AsyncMemoryHub` is the asyncio twin; `memoryhub_client.langgraph.MemoryHubStore` is a
LangGraph `BaseStore` on top (extra `langgraph`).
"""

from __future__ import annotations

from memoryhub_client._core import VERSION as __version__  # noqa: F401, N811 - public
from memoryhub_client._core import RetryPolicy
from memoryhub_client.aio import AsyncEventFeed, AsyncMemoryHub
from memoryhub_client.client import EventFeed, MemoryHub
from memoryhub_client.errors import (
    BackendUnavailableError,
    ConflictError,
    DatabaseError,
    EmbeddingError,
    IdempotencyMismatchError,
    InvalidInputError,
    MemoryHubConnectionError,
    MemoryHubError,
    NotFoundError,
    PayloadTooLargeError,
    QuotaExceededError,
    RateLimitedError,
    ScopeDeniedError,
    SecretRejectedError,
    UnauthenticatedError,
)
from memoryhub_client.types import (
    ApiIndex,
    ArchivalMatch,
    ErasureResult,
    Event,
    ExtractResult,
    FeedPage,
    ForgetResult,
    HydrateEntry,
    HydrateResult,
    IngestResult,
    Kind,
    Memory,
    Message,
    Page,
    SearchHit,
    SearchResult,
    StoreResult,
    Thread,
    Webhook,
    WebhookCreated,
)

__all__ = [
    "ApiIndex",
    "ArchivalMatch",
    "AsyncEventFeed",
    "AsyncMemoryHub",
    "BackendUnavailableError",
    "ConflictError",
    "DatabaseError",
    "EmbeddingError",
    "ErasureResult",
    "Event",
    "EventFeed",
    "ExtractResult",
    "FeedPage",
    "ForgetResult",
    "HydrateEntry",
    "HydrateResult",
    "IdempotencyMismatchError",
    "IngestResult",
    "InvalidInputError",
    "Kind",
    "Memory",
    "MemoryHub",
    "MemoryHubConnectionError",
    "MemoryHubError",
    "Message",
    "NotFoundError",
    "Page",
    "PayloadTooLargeError",
    "QuotaExceededError",
    "RateLimitedError",
    "RetryPolicy",
    "ScopeDeniedError",
    "SearchHit",
    "SearchResult",
    "SecretRejectedError",
    "StoreResult",
    "Thread",
    "UnauthenticatedError",
    "Webhook",
    "WebhookCreated",
]

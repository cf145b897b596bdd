"""The Python client (clients/python) against a live MemoryHub: uvicorn on loopback serving the
app `make run` serves, over the suite's real PostgreSQL. Back-off waits are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any

import pytest
from memoryhub_client import AsyncMemoryHub, MemoryHub, RetryPolicy

from tests.factories import make_agent, make_key, make_tenant
from tests.support.live_server import asgi_server  # noqa: F401 - the fixture

NO_JITTER = RetryPolicy(jitter=False)


@dataclass
class LiveHub:
    url: str
    key: str  # read + write + admin
    agent: Any
    sleeps: list[float] = field(default_factory=list)

    def client(self, key: str | None = None, **kwargs: Any) -> MemoryHub:
        kwargs.setdefault("retry", NO_JITTER)
        return MemoryHub(self.url, key or self.key, sleep=self.sleeps.append, **kwargs)


@pytest.fixture
def live(asgi_server):  # noqa: F811 - the imported fixture
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write", "admin"])
    return LiveHub(url=asgi_server, key=raw, agent=agent)


class SyncOverAsync:
    """`AsyncMemoryHub` driven from a synchronous test on one event loop, so one test body
    checks both clients: coroutines are awaited, async iterators collected into lists."""

    def __init__(self, hub: AsyncMemoryHub, loop: asyncio.AbstractEventLoop) -> None:
        self._hub, self._loop = hub, loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._hub, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if inspect.isasyncgen(result):
                return self._loop.run_until_complete(_collect(result))
            if inspect.isawaitable(result):
                return self._loop.run_until_complete(result)
            if hasattr(result, "__aiter__"):
                return SyncFeed(result, self._loop)
            return result

        return call

    def close(self) -> None:
        self._loop.run_until_complete(self._hub.aclose())


class SyncFeed:
    """An `AsyncEventFeed` iterated from a synchronous test, one item (or page) at a time, so a
    `break` stops its walk where the test stopped, as it would in an `async for`."""

    def __init__(self, feed: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._feed, self._loop = feed, loop

    @property
    def cursor(self) -> str | None:
        return self._feed.cursor

    def __iter__(self) -> Any:
        return self._step(aiter(self._feed))

    def pages(self) -> Any:
        return self._step(self._feed.pages())

    def _step(self, agen: Any) -> Any:
        try:
            while True:
                try:
                    yield self._loop.run_until_complete(anext(agen))
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run_until_complete(agen.aclose())


async def _collect(agen) -> list[Any]:
    return [item async for item in agen]


@pytest.fixture(params=["sync", "async"])
def make_hub(request, live):
    """Build a client of the parametrised flavour: make_hub(key=None, url=None, **kwargs)."""
    loop = asyncio.new_event_loop() if request.param == "async" else None
    made: list[Any] = []

    async def record(seconds: float) -> None:
        live.sleeps.append(seconds)

    def build(key: str | None = None, url: str | None = None, **kwargs: Any):
        kwargs.setdefault("retry", NO_JITTER)
        url, key = url or live.url, key or live.key
        if loop is None:
            hub = MemoryHub(url, key, sleep=live.sleeps.append, **kwargs)
        else:
            hub = SyncOverAsync(AsyncMemoryHub(url, key, sleep=record, **kwargs), loop)
        made.append(hub)
        return hub

    yield build
    for hub in made:
        hub.close()
    if loop is not None:
        loop.close()


@pytest.fixture
def hub(make_hub):
    return make_hub()

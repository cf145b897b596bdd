"""`notifications/tools/list_changed` for a tenant whose kind registry changed.

A change to the registry (`services.kinds`) sends `NOTIFY memoryhub_kinds, '<tenant id>'` at
commit, from whichever process made it (a web worker serving REST or the console, a command).
Each web process that has MCP clients listening (`subscriptions/listen`, the SDK's change
stream) holds one PostgreSQL connection that LISTENs on that channel, and hands the event to
the listen streams of that tenant only: a tenant never learns that another changed its kinds.

`TenantBus` is the SDK's `SubscriptionBus` seam: a listen stream subscribes while
`CURRENT_TENANT` names its caller's tenant (set by `tenant_middleware` for every request), and
the bus delivers by tenant. The LISTEN connection is opened with the first stream and closed
with the last; `ready()` waits until it listens, so an acknowledged stream misses nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import psycopg
from django.db import connections
from mcp.server.subscriptions import ServerEvent, ToolsListChanged

from memories.mcp.calls import request_principal
from memories.services.kind_changes import NOTIFY_CHANNEL

logger = logging.getLogger(__name__)

# The tenant of the MCP request being handled (None: unauthenticated, or not an HTTP request).
CURRENT_TENANT: ContextVar[int | None] = ContextVar("memoryhub_mcp_tenant", default=None)
RECONNECT_DELAYS = (0.5, 1, 2, 5, 10, 30)  # seconds between attempts, the last repeated
READY_TIMEOUT = 5.0


def _conninfo() -> dict[str, Any]:
    """The default database's connection parameters, as psycopg takes them."""
    params = connections["default"].get_connection_params()
    return {
        name: value
        for name, value in params.items()
        if name not in ("cursor_factory", "context", "prepare_threshold")
    }


class TenantBus:
    """A `SubscriptionBus` that delivers by tenant, fed by PostgreSQL notifications."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[int | None, Callable[[ServerEvent], None]]] = {}
        self._task: asyncio.Task | None = None
        self._listening: asyncio.Event | None = None

    async def publish(self, event: ServerEvent) -> None:
        """Events the SDK publishes itself (none of our tools does) go to every stream."""
        for _, listener in list(self._listeners.values()):
            listener(event)

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = (CURRENT_TENANT.get(), listener)
        self._start()

        def unsubscribe() -> None:
            self._listeners.pop(token, None)
            if not self._listeners and self._task is not None:
                self._task.cancel()
                self._task = None

        return unsubscribe

    def deliver(self, tenant_id: int) -> None:
        """The registry of `tenant_id` changed: tell that tenant's streams."""
        for tenant, listener in list(self._listeners.values()):
            if tenant == tenant_id:
                listener(ToolsListChanged())

    async def ready(self) -> None:
        """Start listening (if no stream does yet) and wait until PostgreSQL listens."""
        self._start()
        assert self._listening is not None
        try:
            await asyncio.wait_for(self._listening.wait(), READY_TIMEOUT)
        except TimeoutError:
            logger.warning("kind notifications: not listening yet; a change may go unannounced")

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._listen(self._listening))

    async def _listen(self, listening: asyncio.Event) -> None:
        attempt = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(**_conninfo(), autocommit=True)
                async with conn:
                    await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    listening.set()
                    attempt = 0
                    async for notify in conn.notifies():
                        if notify.payload.isdigit():
                            self.deliver(int(notify.payload))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database may be down: try again
                listening.clear()
                delay = RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)]
                attempt += 1
                logger.warning("kind notifications: %s; listening again in %ss", exc, delay)
                await asyncio.sleep(delay)


async def tenant_middleware(ctx, call_next):
    """Every MCP request runs with its caller's tenant in `CURRENT_TENANT` (what `TenantBus`
    subscribes a listen stream under); a listen stream is acknowledged only once the process
    listens for registry changes."""
    principal = request_principal(ctx.request)
    token = CURRENT_TENANT.set(principal.tenant.pk if principal is not None else None)
    try:
        if ctx.method == "subscriptions/listen" and principal is not None:
            await bus.ready()
        return await call_next(ctx)
    finally:
        CURRENT_TENANT.reset(token)


bus = TenantBus()

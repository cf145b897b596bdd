"""`notifications/tools/list_changed` for a tenant whose kind registry changed.

A change to the registry (`services.kinds`) bumps the tenant's `kinds_version` and sends
`NOTIFY memoryhub_kinds, '<tenant id>'` at commit, from whichever process made it (a web worker
serving REST or the console, a command). Each web process that has MCP clients listening
(`subscriptions/listen`, the SDK's change stream) holds one PostgreSQL connection that follows
the kinds versions of its listeners' tenants, and tells the listen streams of a tenant whose
version rose: a tenant never learns that another changed its kinds.

The connection LISTENs on that channel, and a notification makes it read the versions again;
on every (re)connection it reads them too, so a change made while it was away (the database
restarted, the connection dropped) is announced when it is back. Behind a transaction-mode
pooler, where LISTEN hears nothing, it listens over `MEMORYHUB_DIRECT_DATABASE_URL`, or without
one reads the versions every `MEMORYHUB_KINDS_POLL_SECONDS`
(docs/operations.md#behind-a-connection-pooler).

`TenantBus` is the SDK's `SubscriptionBus` seam: a listen stream subscribes while
`CURRENT_TENANT` names its caller's tenant (set by `tenant_middleware` for every request), and
the bus delivers by tenant. The connection is opened with the first stream and closed with the
last; `ready()` waits until it has read the stream's tenant's version, so an acknowledged stream
misses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections
from mcp.server.subscriptions import ServerEvent, ToolsListChanged

from accounts.models import Tenant
from memories.mcp.calls import request_principal
from memories.services.kind_changes import NOTIFY_CHANNEL
from memoryhub.pooling import transaction_pooled

logger = logging.getLogger(__name__)

# The tenant of the MCP request being handled (None: unauthenticated, or not an HTTP request).
CURRENT_TENANT: ContextVar[int | None] = ContextVar("memoryhub_mcp_tenant", default=None)
RECONNECT_DELAYS = (0.5, 1, 2, 5, 10, 30)  # seconds between attempts, the last repeated
READY_TIMEOUT = 5.0
# While listening, how often the connection looks up from its notifications for a new stream's
# tenant whose version it has not read yet.
NEW_TENANT_CHECK = 0.1
APPLICATION_NAME = "memoryhub kind changes"
VERSIONS_SQL = f"SELECT id, kinds_version FROM {Tenant._meta.db_table} WHERE id = ANY(%s)"


def _conninfo() -> dict[str, Any]:
    """The connection parameters of the one that follows registry changes, as psycopg takes
    them: the direct URL when set, else the default database's (no prepared statements, which a
    transaction-mode pooler cannot keep)."""
    if settings.MEMORYHUB_DIRECT_DATABASE_URL:
        return {
            "conninfo": settings.MEMORYHUB_DIRECT_DATABASE_URL,
            "application_name": APPLICATION_NAME,
            "prepare_threshold": None,
        }
    params = connections["default"].get_connection_params()
    info = {
        name: value
        for name, value in params.items()
        if name not in ("cursor_factory", "context", "prepare_threshold")
    }
    return {**info, "application_name": APPLICATION_NAME, "prepare_threshold": None}


def _listens() -> bool:
    """LISTEN (or, behind a transaction-mode pooler with no direct URL, poll)."""
    return bool(settings.MEMORYHUB_DIRECT_DATABASE_URL) or not transaction_pooled()


class TenantBus:
    """A `SubscriptionBus` that delivers by tenant, fed by the tenants' kinds versions."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[int | None, Callable[[ServerEvent], None]]] = {}
        self._task: asyncio.Task | None = None
        self._listening: asyncio.Event | None = None
        self._versions: dict[int, int] = {}  # the version each followed tenant was last told
        self._pending: set[int] = set()  # tenants of streams waiting in `ready()`
        self._read: asyncio.Event | None = None  # set at each reading of the versions
        self._wake: asyncio.Event | None = None  # a poll's early wake-up, for a new tenant

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
                self._versions.clear()

        return unsubscribe

    def deliver(self, tenant_id: int) -> None:
        """The registry of `tenant_id` changed: tell that tenant's streams."""
        for tenant, listener in list(self._listeners.values()):
            if tenant == tenant_id:
                listener(ToolsListChanged())

    async def ready(self, tenant_id: int | None = None) -> None:
        """Start following (if no stream does yet) and wait until the connection follows
        `tenant_id`'s version (read once it is connected)."""
        self._start()
        assert self._listening is not None and self._read is not None
        if tenant_id is not None and tenant_id not in self._versions:
            self._pending.add(tenant_id)
            assert self._wake is not None
            self._wake.set()
        try:
            async with asyncio.timeout(READY_TIMEOUT):
                await self._listening.wait()
                while tenant_id is not None and tenant_id not in self._versions:
                    self._read.clear()
                    await self._read.wait()
        except TimeoutError:
            logger.warning("kind notifications: not following yet; a change may go unannounced")
        finally:
            self._pending.discard(tenant_id)  # type: ignore[arg-type]

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._listening = asyncio.Event()
            self._read = asyncio.Event()
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._follow(self._listening))

    async def _follow(self, listening: asyncio.Event) -> None:
        attempt = 0
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(**_conninfo(), autocommit=True)
                async with conn:
                    listen = _listens()
                    if listen:
                        await conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    await self._read_versions(conn)  # what changed while not connected
                    listening.set()
                    attempt = 0
                    while True:
                        if await self._changed(conn, listen) or self._unread():
                            await self._read_versions(conn)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the database may be down: try again
                listening.clear()
                delay = RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)]
                attempt += 1
                logger.warning("kind notifications: %s; following again in %ss", exc, delay)
                await asyncio.sleep(delay)

    async def _changed(self, conn: psycopg.AsyncConnection, listen: bool) -> bool:
        """Wait for a sign that a version may have changed: a notification, or (polling) the
        poll's interval. False when the wait ended only to look for new tenants."""
        if not listen:
            assert self._wake is not None
            try:
                async with asyncio.timeout(settings.MEMORYHUB_KINDS_POLL_SECONDS):
                    await self._wake.wait()  # a new stream's tenant to read
            except TimeoutError:
                return True
            self._wake.clear()
            return False
        # Closed before the connection is used again: a running generator holds its lock.
        async with contextlib.aclosing(conn.notifies(timeout=NEW_TENANT_CHECK)) as notifies:
            async for _notify in notifies:
                return True
        return False

    def _unread(self) -> bool:
        return any(tenant not in self._versions for tenant in self._followed())

    def _followed(self) -> set[int]:
        subscribed = {tenant for tenant, _ in self._listeners.values() if tenant is not None}
        return subscribed | self._pending

    async def _read_versions(self, conn: psycopg.AsyncConnection) -> None:
        """Read the followed tenants' versions; tell the streams of each whose version rose."""
        followed = self._followed()
        cursor = await conn.execute(VERSIONS_SQL, [list(followed)])
        for tenant_id, version in await cursor.fetchall():
            told = self._versions.get(tenant_id)
            self._versions[tenant_id] = version
            if told is not None and version > told:
                self.deliver(tenant_id)
        for gone in set(self._versions) - followed:
            del self._versions[gone]
        assert self._read is not None
        self._read.set()


async def tenant_middleware(ctx, call_next):
    """Every MCP request runs with its caller's tenant in `CURRENT_TENANT` (what `TenantBus`
    subscribes a listen stream under); a listen stream is acknowledged only once the process
    listens for registry changes."""
    principal = request_principal(ctx.request)
    token = CURRENT_TENANT.set(principal.tenant.pk if principal is not None else None)
    try:
        if ctx.method == "subscriptions/listen" and principal is not None:
            await bus.ready(principal.tenant.pk)
        return await call_next(ctx)
    finally:
        CURRENT_TENANT.reset(token)


bus = TenantBus()

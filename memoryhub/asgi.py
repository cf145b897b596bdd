"""ASGI entry point: the MCP SDK serves `/mcp`; Django serves everything else, as WSGI.

Every Django view is synchronous, and Django's own ASGI handler runs each request through
`sync_to_async` in a new thread of its own (a fresh executor per request): an overhead per request
on a small machine larger than a whole recall by key (docs/performance.md#code-figures). So Django
runs as a WSGI app in a fixed pool of threads (the pool is memoryhub/web_pool.py's, shared with the
MCP tools), `MEMORYHUB_WEB_THREADS` of them. The request body is read here first, whole, up to
`MEMORYHUB_MAX_BODY_BYTES` (413 beyond; a conversation's messages may be larger: `body_limit`); a
chunked body (no length, which WSGI would hand Django as empty) is given its length. Django's answer
is made in a pool thread and sent from here in one piece with its length: one hand-over from the
thread to the event loop a request, where `a2wsgi` (what uvicorn's `--interface wsgi` uses) made one
per ASGI message. Streamed responses (markdown and JSONL exports) stream chunk by chunk with
backpressure. A body declared longer than its limit goes to Django unread (through `a2wsgi`), and
Django's middleware answers the 413.

The MCP app's lifespan (its session manager) runs with the server's; Django has no lifespan
handler, so lifespan events go to the MCP app, after `settle_worker` has run at start-up: each
uvicorn worker imports its views and loads the local embedding model before it takes its first
request (which would otherwise wait for them), then freezes what start-up allocated
out of the cyclic garbage collector's sight (`MEMORYHUB_GC_FREEZE`): the ~150k objects of
Django, the MCP SDK and the model's runtime never become garbage, yet each full collection
walked them all, stalling the worker's requests (docs/performance.md#code-figures).

Every HTTP request is timed here, from arrival to its last byte, and recorded once
(`observed`: the access log line and the HTTP metrics of `memoryhub.observe`), its client's
address and scheme first resolved by the trusted-proxy rule (`memoryhub.proxies`).

`/mcp` requests pass `mcp_transport` first: the `Host` and `Origin` checks (DNS rebinding) with
Django's ALLOWED_HOSTS rules, the JSON content type and the body limit (`MEMORYHUB_MAX_BODY_BYTES`,
every method's body read here whole, declared or chunked), answered in our envelope
(400 INVALID_INPUT, 413 PAYLOAD_TOO_LARGE) rather than the SDK's plain-text pages. A foreign `Origin` is the one
refusal MCP fixes the status of (403), which has no envelope code: it gets a JSON-RPC error.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import io
import itertools
import json
import logging
import os
import time
from urllib.parse import urlsplit

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi import build_environ
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
django_wsgi = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after setup)
from django.db import DatabaseError  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

from memories.mcp_server import (  # noqa: E402  (needs Django set up)
    MCP_PATH,
    PRINCIPAL_SCOPE_KEY,
    mcp_application,
)
from memoryhub import db_outage, embedded_db, observe, proxies  # noqa: E402
from memoryhub.errors import (  # noqa: E402
    BackendUnavailable,
    DomainError,
    EmbeddingError,
    InvalidInput,
    PayloadTooLarge,
    envelope,
)
from memoryhub.middleware import body_limit  # noqa: E402
from memoryhub.renderers import FastJSONRenderer  # noqa: E402
from memoryhub.web_pool import web_executor  # noqa: E402

# Django's WSGIHandler is a WSGI app; the stubs type its start_response more narrowly.
django_wsgi_pool = WSGIMiddleware(django_wsgi, workers=1)  # type: ignore[arg-type]
# a2wsgi runs requests in its executor; it is the process's one pool (made no thread yet).
django_wsgi_pool.executor = web_executor()
host_logger = logging.getLogger("django.security.DisallowedHost")
logger = logging.getLogger("memoryhub.asgi")


async def _send_json(send, status: int, body: bytes, headers=()) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _send_error(send, err: DomainError) -> None:
    body = FastJSONRenderer().render(envelope(err.code, err.message, err.details))
    headers = [(k.lower().encode(), v.encode()) for k, v in err.headers.items()]
    await _send_json(send, err.status, body, headers)


async def _send_too_large(send, limit: int) -> None:
    await _send_error(send, PayloadTooLarge(details={"limit_bytes": limit}))


_OVER_LIMIT = object()


async def _read_body(receive, limit: int):
    """The whole request body; `_OVER_LIMIT` past `limit` bytes, None when the client went
    away."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return _OVER_LIMIT
        if not message.get("more_body", False):
            return bytes(body)


async def _body_or_refuse(receive, send, limit: int) -> bytes | None:
    """The whole body, or None once answered (413 past `limit`) or the client went away."""
    body = await _read_body(receive, limit)
    if body is _OVER_LIMIT:
        await _send_too_large(send, limit)
        return None
    return body


def _replaying(body: bytes, receive):
    """A `receive` that hands over `body` once, then whatever the client sends next."""
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def django_application(scope, receive, send):
    """Django in the thread pool, its request body read whole first (a chunked one given its
    length), its answer sent once Django has made it (`_buffered`). A body declared longer than
    the path accepts goes to Django unread, as before: its middleware answers 413."""
    if scope["type"] != "http":
        await django_wsgi_pool(scope, receive, send)
        return
    headers = scope.get("headers", [])
    limit = body_limit(scope.get("path", ""))
    declared = next((value for name, value in headers if name == b"content-length"), None)
    if declared is not None:
        if not declared.isdigit() or int(declared) > limit:
            await django_wsgi_pool(scope, receive, send)
            return
        body = await _body_or_refuse(receive, send, limit) if int(declared) else b""
    elif any(name == b"transfer-encoding" for name, _ in headers):
        body = await _body_or_refuse(receive, send, limit)
        if body is not None:
            scope = {**scope, "headers": [*headers, (b"content-length", b"%d" % len(body))]}
    else:
        body = b""  # no body at all
    if body is None:  # answered (413), or the client went away
        return
    await _buffered(scope, body, send)


# Statuses whose answer has no body, and so no Content-Length of ours.
_NO_BODY = frozenset({204, 304})


async def _buffered(scope, body: bytes, send) -> None:
    """Django's answer to a request whose body is read: made in one of the pool's threads, then
    sent from here in one piece with its Content-Length. One hand-over from the thread to the
    event loop a request; a2wsgi's responder made one per message (the start, each chunk, the
    end), each waking the loop and the thread, about a tenth of a web process's CPU under load.

    A streamed answer (exports) is sent from the thread as it is made, a chunk at a time and
    waiting for each (backpressure), as a2wsgi does. The request runs start to end (`close`
    included: Django's `request_finished` closes the thread's database connections) in that one
    thread."""
    loop = asyncio.get_running_loop()
    environ = build_environ(scope, io.BytesIO(body))  # type: ignore[arg-type]  # a readable body
    context = contextvars.copy_context()
    answer = await loop.run_in_executor(
        django_wsgi_pool.executor, context.run, _call_django, environ, loop, send
    )
    if answer is None:  # streamed
        return
    status, headers, chunks = answer
    content = b"".join(chunks)
    if status not in _NO_BODY and not any(name == b"content-length" for name, _ in headers):
        headers.append((b"content-length", b"%d" % len(content)))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def _call_django(environ, loop, send):
    """Runs in a pool thread: Django's answer as (status, headers, body chunks), or None once a
    streamed answer has been sent from here."""
    status, headers, chunks = 500, [], []
    headers_sent = False

    def start_response(status_line, response_headers, exc_info=None):
        nonlocal status, headers
        if exc_info is not None and headers_sent:
            raise exc_info[1].with_traceback(exc_info[2])
        status = int(status_line.split(" ", 1)[0])
        headers = [
            (name.strip().encode("latin1").lower(), value.strip().encode("latin1"))
            for name, value in response_headers
        ]
        return chunks.append

    def sent(message) -> None:
        asyncio.run_coroutine_threadsafe(send(message), loop).result()

    response = django_wsgi(environ, start_response)
    try:
        if not getattr(response, "streaming", False):
            chunks.extend(response)
            return status, headers, chunks
        sent({"type": "http.response.start", "status": status, "headers": headers})
        headers_sent = True
        for chunk in itertools.chain(chunks, response):  # write()'s first, then the stream's
            if chunk:
                sent({"type": "http.response.body", "body": chunk, "more_body": True})
        sent({"type": "http.response.body", "body": b""})
        return None
    finally:
        getattr(response, "close", lambda: None)()


def _allowed_hosts() -> list[str]:
    # Django's own fallback (HttpRequest.get_host): DEBUG with no ALLOWED_HOSTS means local.
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return settings.ALLOWED_HOSTS


def _host_allowed(host: str) -> bool:
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())


def _origin_allowed(origin: str) -> bool:
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and _host_allowed(parts.netloc)


async def mcp_transport(scope, receive, send):
    """`/mcp` behind the transport checks (Host, Origin, body size); see the module docstring."""
    if scope["type"] != "http":
        await mcp_application(scope, receive, send)
        return
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    host = headers.get("host", "")
    if settings.USE_X_FORWARDED_HOST and "x-forwarded-host" in headers:
        host = headers["x-forwarded-host"].split(",")[-1].strip()
    if not _host_allowed(host):
        host_logger.warning("Invalid HTTP_HOST header for /mcp: %r", host[:200])
        await _send_error(send, InvalidInput("Invalid Host header", field="Host"))
        return
    origin = headers.get("origin")
    if origin is not None and not _origin_allowed(origin):
        error = {"code": -32600, "message": "Forbidden: this Origin may not use /mcp"}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await _send_json(send, 403, body)
        return
    if db_outage.is_down():
        await _send_error(send, BackendUnavailable())
        return
    limit = body_limit(scope.get("path", ""))
    length = headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        await _send_too_large(send, limit)
        return
    if scope["method"] == "POST" and not (
        headers.get("content-type", "").lower().startswith("application/json")
    ):
        await _send_error(
            send, InvalidInput("Send JSON with Content-Type: application/json", field="body")
        )
        return
    # Every method's body is read here, whole and within the limit: none reaches the SDK, whose
    # own larger limit answers in plain text.
    body = await _body_or_refuse(receive, send, limit)
    if body is None:
        return
    await mcp_application(scope, _replaying(body, receive), send)


def settle_worker() -> None:
    """A web process's start-up, before its first request: the embedded PostgreSQL started (or
    found running), the URLconf imported (every view module), the local model loaded and run
    once (a failure is logged by the embedder and each request answers it with a 502, as
    without), then, with `MEMORYHUB_GC_FREEZE`, everything allocated so far frozen
    (`gc.freeze`). An embedder that is not ready does not stop the process: its requests
    answer it, as they would have."""
    from django.urls import get_resolver

    from memories.embeddings import get_embedder

    if settings.EMBEDDED_DB is not None:
        embedded_db.ensure_started(settings.DATABASES["default"])
    get_resolver().url_patterns  # noqa: B018  (imported on first access)
    try:
        warm = getattr(get_embedder(), "warm", None)
        if warm is not None:
            warm()
    except EmbeddingError as exc:  # a model that fails to load is logged with its cause too
        logger.warning("the embedder is not ready (%s): requests that embed answer 502", exc)
    except DatabaseError as exc:  # `auto` precision reads the stored vectors' model
        logger.warning(
            "the embedder is not built yet (%s): the first request that embeds will", exc
        )
    if settings.MEMORYHUB_GC_FREEZE:
        gc.collect()  # what is garbage already goes now, not into the frozen generation
        gc.freeze()


def _settling(receive):
    """`receive` for the lifespan: `settle_worker` runs when the start-up message comes."""

    async def settled():
        message = await receive()
        if message["type"] == "lifespan.startup":
            settle_worker()  # nothing is served before start-up completes
        return message

    return settled


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await mcp_application(scope, _settling(receive), send)
        return
    if scope["type"] != "http":
        await django_application(scope, receive, send)
        return
    # The client's address and scheme by the trusted-proxy rule, for Django and /mcp alike.
    proxies.resolve_scope(scope)
    await observed(scope, receive, send)


async def observed(scope, receive, send):
    """An HTTP request, timed from here to its last byte and recorded (`memoryhub.observe`):
    Django fills in its route, tenant and agent; `/mcp` is one route, its key's principal in
    the scope once the MCP app has authenticated it."""
    started = time.perf_counter()
    info = scope[observe.SCOPE_KEY] = observe.RequestInfo(client=observe.client_of(scope))
    status = 500  # a request that raised before answering

    async def sending(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    path = scope.get("path", "")
    try:
        if path == MCP_PATH or path.startswith(MCP_PATH + "/"):
            info.route = MCP_PATH
            await mcp_transport(scope, receive, sending)
            principal = scope.get(PRINCIPAL_SCOPE_KEY)
            if principal is not None:
                info.tenant, info.agent = principal.tenant.slug, principal.agent.slug
        else:
            await django_application(scope, receive, sending)
    finally:
        observe.record(scope.get("method", ""), status, time.perf_counter() - started, info)

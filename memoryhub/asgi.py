"""ASGI entry point: the MCP SDK serves `/mcp`; Django serves everything else, as WSGI.

Every Django view is synchronous, and Django's own ASGI handler runs each request through
`sync_to_async` in a new thread of its own (a fresh executor per request): ~4 ms of overhead
per request on a small machine, more than a whole recall by key. So Django runs as a WSGI app
in a fixed pool of threads (`a2wsgi`, what uvicorn's `--interface wsgi` uses), whose database
connections live as long as the threads; `MEMORYHUB_WEB_THREADS` sizes it. Streamed responses
(markdown and JSONL exports) stream chunk by chunk with backpressure.

WSGI knows a request body's length only from `Content-Length`; a chunked body (no length) would
reach Django empty. Such a body is read here first, up to `MEMORYHUB_MAX_BODY_BYTES` (413
beyond, as for a declared length; a conversation's messages may be larger: `body_limit`),
and handed on with its length.

The MCP app's lifespan (its session manager) runs with the server's; Django has no lifespan
handler, so lifespan events go to the MCP app only.
"""

from __future__ import annotations

import os

from a2wsgi import WSGIMiddleware
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
django_wsgi = get_wsgi_application()

from django.conf import settings  # noqa: E402  (after setup)

from memories.mcp_server import MCP_PATH, mcp_application  # noqa: E402  (needs Django set up)
from memoryhub.errors import PayloadTooLarge, envelope  # noqa: E402
from memoryhub.middleware import body_limit  # noqa: E402
from memoryhub.renderers import FastJSONRenderer  # noqa: E402

django_wsgi_pool = WSGIMiddleware(django_wsgi, workers=settings.MEMORYHUB_WEB_THREADS)


async def _send_too_large(send, limit: int) -> None:
    err = PayloadTooLarge(details={"limit_bytes": limit})
    body = FastJSONRenderer().render(envelope(err.code, err.message, err.details))
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def django_application(scope, receive, send):
    """Django behind the thread pool, with chunked request bodies given their length."""
    headers = scope.get("headers", [])
    if scope["type"] != "http" or any(name == b"content-length" for name, _ in headers):
        await django_wsgi_pool(scope, receive, send)
        return
    if not any(name == b"transfer-encoding" for name, _ in headers):
        await django_wsgi_pool(scope, receive, send)  # no body at all
        return
    body = bytearray()
    limit = body_limit(scope.get("path", ""))
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if len(body) > limit:
            await _send_too_large(send, limit)
            return
        if not message.get("more_body", False):
            break
    scope = {**scope, "headers": [*headers, (b"content-length", b"%d" % len(body))]}
    replayed = False

    async def replay():
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": bytes(body), "more_body": False}

    await django_wsgi_pool(scope, replay, send)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await mcp_application(scope, receive, send)
        return
    path = scope.get("path", "")
    if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
        await mcp_application(scope, receive, send)
        return
    await django_application(scope, receive, send)

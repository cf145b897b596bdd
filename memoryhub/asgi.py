"""ASGI entry point: the MCP SDK serves `/mcp`; Django serves everything else, as WSGI.

Every Django view is synchronous, and Django's own ASGI handler runs each request through
`sync_to_async` in a new thread of its own (a fresh executor per request): ~4 ms of overhead
per request on a small machine, more than a whole recall by key. So Django runs as a WSGI app
in a fixed pool of threads (`a2wsgi`, what uvicorn's `--interface wsgi` uses), whose database
connections live as long as the threads; `MEMORYHUB_WEB_THREADS` sizes it. Streamed responses
(markdown and JSONL exports) stream chunk by chunk with backpressure.

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

django_application = WSGIMiddleware(django_wsgi, workers=settings.MEMORYHUB_WEB_THREADS)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await mcp_application(scope, receive, send)
        return
    path = scope.get("path", "")
    if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
        await mcp_application(scope, receive, send)
        return
    await django_application(scope, receive, send)

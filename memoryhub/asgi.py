"""ASGI entry point: Django serves everything except `/mcp`, which the official MCP SDK serves.

The MCP app's lifespan (its session manager) runs with the server's; Django itself has no
lifespan handler, so lifespan events go to the MCP app only.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
django_application = get_asgi_application()

from memories.mcp_server import MCP_PATH, mcp_application  # noqa: E402  (needs Django set up)


async def application(scope, receive, send):
    if scope["type"] == "lifespan":
        await mcp_application(scope, receive, send)
        return
    path = scope.get("path", "")
    if scope["type"] == "http" and (path == MCP_PATH or path.startswith(MCP_PATH + "/")):
        await mcp_application(scope, receive, send)
        return
    await django_application(scope, receive, send)

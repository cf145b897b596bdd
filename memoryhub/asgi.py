"""ASGI entry point: Django for everything (the MCP endpoint mounts beside it at /mcp)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
application = get_asgi_application()

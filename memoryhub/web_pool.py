"""The one pool of threads a web process runs its synchronous work in: Django's requests
(memoryhub/asgi.py) and the MCP tools' service calls (memories/mcp/calls.py).

Its size, `MEMORYHUB_WEB_THREADS`, is what the psycopg pool is sized from
(`MEMORYHUB_DB_POOL_SIZE` defaults to it plus the outage watcher and one spare): every thread
can hold a connection, so no request waits for one while the database is up. Threads are made
on first need and then kept: no thread is created per request.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from django.conf import settings

_executor: ThreadPoolExecutor | None = None


def web_executor() -> ThreadPoolExecutor:
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(
            max_workers=settings.MEMORYHUB_WEB_THREADS, thread_name_prefix="web"
        )
    return _executor

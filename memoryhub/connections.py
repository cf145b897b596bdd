"""How many PostgreSQL connections a node asks for, from its settings: the web processes' share
of `MEMORYHUB_DB_CONNECTIONS` (their threads, search branch threads and pool, which the settings
take from here) and, for `manage.py check`, the whole node's (memoryhub/checks.py)."""

from __future__ import annotations

from dataclasses import dataclass

from memoryhub.env import env_int

# The django-q2 cluster's connections besides its workers': the sentinel (its scheduler), the
# pusher and the monitor, each a process of its own.
CLUSTER_PROCESSES = 3
# Each web process's LISTEN connection, outside its pool, while an MCP stream is open
# (memories/mcp/listen.py).
LISTENERS_PER_PROCESS = 1


@dataclass(frozen=True)
class WebShare:
    """One web process's threads and connections when `workers` share `budget`."""

    threads: int
    branch_threads: int
    pool_size: int


def web_share(budget: int, workers: int) -> WebShare:
    """Each of `workers` processes gets `budget // workers` connections (at least 4): threads
    and search branch threads each may hold one, plus the outage watcher's and a spare.
    MEMORYHUB_WEB_THREADS, _SEARCH_BRANCH_THREADS and _DB_POOL_SIZE override each part."""
    per_process = max(4, budget // max(1, workers))
    branch = env_int("MEMORYHUB_SEARCH_BRANCH_THREADS", 2 if per_process >= 8 else 0)
    threads = env_int("MEMORYHUB_WEB_THREADS", min(16, per_process - 2 - branch))
    pool = env_int("MEMORYHUB_DB_POOL_SIZE", threads + branch + 2)
    return WebShare(threads=threads, branch_threads=branch, pool_size=pool)


def node_connections(*, budget: int, workers: int, cluster_workers: int) -> dict[str, int]:
    """The most connections one node (`serve`: `workers` web processes and the cluster) may
    open: its web processes' budget, or their pools where those add up to more (each keeps 4
    at least), their LISTEN connections, and the cluster's."""
    share = web_share(budget, workers)
    web = max(budget, workers * share.pool_size)
    listening = workers * LISTENERS_PER_PROCESS
    cluster = cluster_workers + CLUSTER_PROCESSES
    return {
        "workers": workers,
        "per_process": share.pool_size,
        "web": web,
        "listening": listening,
        "cluster": cluster,
        "total": web + listening + cluster,
    }

"""pgvector's HNSW scan settings, held by every connection from its start.

Every statement that walks an HNSW index (search's ranking, a store's look-alikes) wants iterative
scans (`relaxed_order`: a selective tenant/agent/subject filter still yields its rows) and a
candidate list of `EF_SEARCH`. They are startup options of the connection (`-c name=value`: no round
trip at all) rather than set per transaction (`SET LOCAL`), which would cost every search a BEGIN, a
SET and a COMMIT around its one statement and every store one statement more
(docs/performance.md#where-a-requests-cpu-goes); the code sets them locally only where it needs
another value (a search deeper than `EF_SEARCH`) or where the connection does not carry them
(`MEMORYHUB_DB_SESSION_SETTINGS=0`: behind a transaction-mode pooler, which refuses or drops startup
options).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.db import connection, transaction

from memoryhub.pipeline import in_pipeline

ITERATIVE_SCAN = "relaxed_order"
# Candidates visited by the HNSW scan; iterative scans go further when filters drop rows.
EF_SEARCH = 100


def startup_options() -> str:
    """libpq's `options` that give a new connection these settings."""
    return f"-c hnsw.iterative_scan={ITERATIVE_SCAN} -c hnsw.ef_search={EF_SEARCH}"


def local_settings_sql(ef_search: int) -> str | None:
    """The `SET LOCAL`s a transaction must run before an HNSW walk of `ef_search` candidates;
    None when the connection already holds those settings from its start."""
    ef_search = max(EF_SEARCH, int(ef_search))
    if settings.MEMORYHUB_DB_SESSION_SETTINGS and ef_search == EF_SEARCH:
        return None
    return (
        f"SET LOCAL hnsw.iterative_scan = {ITERATIVE_SCAN}; SET LOCAL hnsw.ef_search = {ef_search}"
    )


@contextmanager
def scan_settings(ef_search: int, *, savepoint: bool = True) -> Iterator[None]:
    """A block whose HNSW walks of `ef_search` candidates have these settings: the connection's
    own, or `local_settings_sql`'s, set inside a transaction around the block."""
    local = local_settings_sql(ef_search)
    if local is None:
        yield
        return
    with transaction.atomic(savepoint=savepoint), connection.cursor() as cursor:
        # Queued with others (`memoryhub.pipeline`), each statement goes alone: no round trip more.
        for statement in local.split("; ") if in_pipeline() else [local]:
            cursor.execute(statement)
        yield

"""Statements sent together: psycopg's pipeline mode on Django's connection.

PostgreSQL answers each statement a request runs after a round trip of its own. Statements whose
parameters do not depend on an earlier one's answer (a lock, a write, a read whose rows the code
looks at later) can go out together: `pipelined()` queues the ones executed in its block and
sends them with one Sync at its end, when all their answers come back at once. Their cursors are
read after the block (a fetch inside it costs a round trip of its own). PostgreSQL still runs
them one after the other, in order, each with its own snapshot, exactly as if sent one by one.

Off (`MEMORYHUB_DB_PIPELINE=0`, the default for a database on this host), the block sends each
statement by itself and reads each answer at once, as code without it would.

Inside a transaction they are part of it. Outside one (autocommit), PostgreSQL runs the block's
statements as one implicit transaction, committed at the Sync: a `set_config(…, true)` holds
for the statements after it in the block and no longer. Nothing outlives the block, so it works
behind a transaction-mode pooler too. An error any of them raises comes out of the block's end
as Django's exception (`IntegrityError`, `OperationalError`, …), and the statements after it
are not run; a transaction (or savepoint) around the block is rolled back as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.conf import settings
from django.db import connection
from psycopg import pq

# The readers `when_answered` put off until the current block's answers are in.
_later: ContextVar[list[Callable[[], None]] | None] = ContextVar("pipelined_later", default=None)


@contextmanager
def pipelined() -> Iterator[None]:
    """A block whose statements go out together and are answered by one round trip, at its end;
    then the readers that `when_answered` put off run, in order."""
    connection.ensure_connection()
    later: list[Callable[[], None]] = []
    token = _later.set(later)
    try:
        if enabled():
            with connection.wrap_database_errors, connection.connection.pipeline():
                yield
        else:  # each statement its own round trip, as without the block
            yield
    finally:
        _later.reset(token)
    for read in later:
        read()


def enabled() -> bool:
    """Whether `pipelined()` sends its statements together (`MEMORYHUB_DB_PIPELINE`): psycopg's
    pipeline mode costs more CPU per statement than a round trip over a local socket."""
    return bool(getattr(settings, "MEMORYHUB_DB_PIPELINE", False))


def when_answered(read: Callable[[], None]) -> None:
    """Run `read` (it reads the answer of a statement just executed) now, or, inside a
    `pipelined()` block, at its end: code that executes a statement and reads its answer at
    once can then ride in a block with others."""
    later = _later.get()
    if later is None:
        read()
    else:
        later.append(read)


def in_pipeline() -> bool:
    """Whether statements executed now are queued by `pipelined()`: each must then be one
    statement (the extended protocol's messages carry one), never `a; b`."""
    raw = connection.connection
    return raw is not None and raw.pgconn.pipeline_status != pq.PipelineStatus.OFF

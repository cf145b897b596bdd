"""Writes in flight, and the horizon of a list walk.

A write stamps `created_at`/`updated_at` (and its revision and events) with a time taken
before it commits; a reader that walked past that time in the meantime would never meet the
row (`GET /api/v1/memories` and its `updated_after`). So a write announces itself first:
`write_stamp`, the first statement of its transaction, takes a shared transaction-level
advisory lock whose two keys encode a time no later than the stamp it then returns, and
PostgreSQL drops the lock only once the commit is visible (or the transaction rolled back).
`list_horizon` reads those locks before the walk's own statements take their snapshot: the
instant just before the oldest write in flight. Every write stamped at or before it has
committed and is in the walk's snapshot; every write not yet announced takes its stamp after
the horizon was read, so after the horizon. The walk is read as of that instant, and its
pages say so (`as_of`): a client that next asks `updated_after=<as_of>` misses no write.

Transaction-level locks work through a transaction-mode pooler too. Stamps come from each
node's clock: nodes' clocks must agree (NTP), as they must for `updated_at` itself.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db import connection
from django.utils import timezone

# The keys: whole seconds since _EPOCH (the first), and _TAG in the second's top bits over
# the microsecond (the second). The jobs' liveness locks, the only other two-key advisory
# locks, have a first key from 0x4D480000 and a second below 2**31 - 2**20: none is read as a
# write in flight before 2061.
_EPOCH = datetime(2020, 1, 1, tzinfo=UTC)
_TAG = 2047
_MICROSECOND_BITS = 20

_ANNOUNCE = "SELECT pg_advisory_xact_lock_shared(%s::int, %s::int)"
_OLDEST = f"""
SELECT min(classid::int8 * 1000000 + (objid::int8 & {(1 << _MICROSECOND_BITS) - 1}))
FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 2
  AND (objid::int8 >> {_MICROSECOND_BITS}) = {_TAG}
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid <> pg_backend_pid()
"""
_ONE = timedelta(microseconds=1)


def write_stamp(now: datetime | None = None) -> datetime:
    """Announce the current transaction as a write in flight until it ends, and return the
    time it stamps its rows with: the clock read after the announcement, or `now` when the
    caller pins one (jobs' `--now`, tests). Call it inside the write's transaction, before
    its lock waits."""
    if not connection.in_atomic_block:
        raise RuntimeError("write_stamp() belongs inside the write's transaction")
    clock = timezone.now()
    floor = clock if now is None else min(now, clock)
    offset = floor - _EPOCH
    seconds = offset.days * 86400 + offset.seconds
    with connection.cursor() as cursor:
        cursor.execute(_ANNOUNCE, [seconds, (_TAG << _MICROSECOND_BITS) | offset.microseconds])
    if now is not None:
        return now
    return max(timezone.now(), floor)  # never before its announcement, even if the clock steps


def list_horizon(now: datetime) -> datetime:
    """The newest instant no write still in flight can land at or before: `now`, or just
    before the oldest announced write's stamp. Read it before the statements it bounds. The
    reader's own transaction's writes are not in flight for it: it sees them already."""
    with connection.cursor() as cursor:
        cursor.execute(_OLDEST)
        oldest = cursor.fetchone()[0]
    if oldest is None:
        return now
    seconds, microseconds = divmod(oldest, 1_000_000)
    return min(now, _EPOCH + timedelta(seconds=seconds, microseconds=microseconds) - _ONE)

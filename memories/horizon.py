"""Writes in flight, and the horizon of a list walk.

A write stamps `created_at`/`updated_at` (and its revision and events) with a time taken
before it commits; a reader that walked past that time in the meantime would never meet the
row (`GET /api/v1/memories` and its `updated_after`). So a write announces itself first:
`write_stamp`, the first statement of its transaction (or a store's `announcement`, carried by
its first statement: `kind_registry.kind_guard`), takes a shared transaction-level
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

from dataclasses import dataclass
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

# The announcement: an expression, so that a statement the write runs anyway can carry it.
ANNOUNCE = "pg_advisory_xact_lock_shared(%s::int, %s::int)"
_OLDEST = f"""
SELECT min(classid::int8 * 1000000 + (objid::int8 & {(1 << _MICROSECOND_BITS) - 1}))
FROM pg_locks
WHERE locktype = 'advisory' AND objsubid = 2
  AND (objid::int8 >> {_MICROSECOND_BITS}) = {_TAG}
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid <> pg_backend_pid()
"""
_ONE = timedelta(microseconds=1)


@dataclass(frozen=True)
class Announcement:
    """A write's announcement, not yet run: `ANNOUNCE` with `params`, then `stamp()`."""

    params: tuple[int, int]
    floor: datetime  # the time the lock's keys encode: never after the stamp
    now: datetime | None  # the caller's pinned time

    def stamp(self) -> datetime:
        """The time the write stamps its rows with, once the statement carrying the
        announcement has run: the clock read now, or the pinned time."""
        if self.now is not None:
            return self.now
        # Never before its announcement, even if the clock steps.
        return max(timezone.now(), self.floor)


def announcement(now: datetime | None = None) -> Announcement:
    """The current transaction's announcement as a write in flight, for its first statement to
    carry (`ANNOUNCE` with `params`); `stamp()` once that statement ran. `now`: the caller's
    pinned time (jobs' `--now`, tests)."""
    if not connection.in_atomic_block:
        raise RuntimeError("a write's announcement belongs inside the write's transaction")
    clock = timezone.now()
    floor = clock if now is None else min(now, clock)
    offset = floor - _EPOCH
    seconds = offset.days * 86400 + offset.seconds
    return Announcement((seconds, (_TAG << _MICROSECOND_BITS) | offset.microseconds), floor, now)


def write_stamp(now: datetime | None = None) -> datetime:
    """Announce the current transaction as a write in flight until it ends (a statement of its
    own), and return the time it stamps its rows with: the clock read after the announcement,
    or `now` when the caller pins one (jobs' `--now`, tests). Call it inside the write's
    transaction, before its lock waits."""
    announced = announcement(now)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {ANNOUNCE}", list(announced.params))
    return announced.stamp()


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

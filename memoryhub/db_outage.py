"""Fail fast while the database is down, and come back as soon as it accepts connections.

Without this, a request during an outage waits for the psycopg pool's timeout, and after the
outage the pool's reconnection attempts sit in their exponential back-off (1, 2, 4, 8 … s),
so the first success comes seconds after the database is back, the later the longer it was
gone.

Any sign of trouble (`report()`: a failed connection attempt of the pool, an
`OperationalError` reaching an error handler, a failed health check) wakes one watcher thread
per process, which connects to the server itself:

- it answers: a stale connection, not an outage. The pool checks its idle connections in the
  background and replaces the broken ones.
- it does not: the database is **down**. Every request is answered `503 BACKEND_UNAVAILABLE`
  at once (`DatabaseOutageMiddleware`, the MCP transport) without touching the pool, and the
  pool is replaced by a fresh one, which fails the requests still waiting in the old one. The
  watcher probes every `PROBE_INTERVAL` seconds; on the first success it replaces the pool
  again (dropping whatever a background thread started meanwhile), so the next request opens
  a new connection at once, and the database is **up**.

On by default outside tests (`MEMORYHUB_DB_FAIL_FAST`); with it off, `report` does nothing and
the database is never considered down.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import psycopg

logger = logging.getLogger(__name__)

PROBE_INTERVAL = 0.1  # seconds between probes while the database is down
PROBE_TIMEOUT = 2  # seconds (libpq's connect_timeout): a hung server counts as down


class OutageWatch:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._watching = False
        self._down_since: float | None = None

    def is_down(self) -> bool:
        return self._down_since is not None

    def report(self) -> None:
        """Something failed that a database outage would explain: make sure someone looks."""
        from django.conf import settings

        if not settings.MEMORYHUB_DB_FAIL_FAST:
            return
        with self._lock:
            if self._watching:
                return
            self._watching = True
        threading.Thread(target=self._watch, name="memoryhub-db-watch", daemon=True).start()

    def _watch(self) -> None:
        try:
            if probe():
                refresh_pools()
                return
            self._down_since = time.monotonic()
            logger.warning("database unavailable: answering 503 until it accepts connections")
            replace_pools()
            while not probe():
                time.sleep(PROBE_INTERVAL)
            replace_pools()
            logger.warning(
                "database accepts connections again after %.1f s",
                time.monotonic() - self._down_since,
            )
            self._down_since = None
        except Exception:  # noqa: BLE001 - the watcher must never leave the process "down"
            logger.exception("database outage watcher failed")
            self._down_since = None
        finally:
            with self._lock:
                self._watching = False


watch = OutageWatch()
is_down = watch.is_down
report = watch.report


def probe(alias: str = "default") -> bool:
    """Does the database accept a connection right now? (A new one, outside any pool.)"""
    from django.db import connections

    db = connections[alias].settings_dict
    try:
        with psycopg.connect(
            host=db["HOST"] or None,
            port=db["PORT"] or None,
            user=db["USER"] or None,
            password=db["PASSWORD"] or None,
            dbname=db["NAME"],
            connect_timeout=PROBE_TIMEOUT,
            autocommit=True,
        ):
            return True
    except psycopg.Error:
        return False


def _pools() -> dict:
    from django.db.backends.postgresql.base import DatabaseWrapper

    # Django 5.2 keeps one psycopg pool per alias in this class attribute (`pool` property).
    return DatabaseWrapper._connection_pools  # type: ignore[attr-defined]  # Django's own


def replace_pools() -> None:
    """Swap every connection pool for a fresh, unopened one, then close the old one.

    The swap is one dict assignment, so a request reading `connection.pool` meanwhile gets one
    pool or the other, never none. Closing the old pool fails its waiting requests at once
    (`PoolClosed`, an OperationalError: 503) and stops its reconnection attempts; connections
    still checked out of it are closed when they are given back."""
    from django.db import connections

    pools = _pools()
    for alias in list(pools):
        wrapper = connections[alias]
        staging = f"{alias}:replacement"
        # The property builds a pool (open=False) exactly as Django does, under another key.
        fresh_wrapper = type(wrapper)(wrapper.settings_dict, alias=staging)
        fresh_wrapper.pool  # type: ignore[attr-defined]  # noqa: B018
        old = pools.get(alias)
        pools[alias] = pools.pop(staging)
        if old is not None:
            old.close(timeout=1)


def refresh_pools() -> None:
    """Check the idle connections of every pool, replacing the broken ones (in the background)."""
    for pool in list(_pools().values()):
        if pool.closed:  # not opened yet, or replaced meanwhile: nothing to check
            continue
        with contextlib.suppress(psycopg.Error):  # closed meanwhile
            pool.check()


class ReportingConnection(psycopg.Connection):
    """The pool's connection class: a failed connection attempt is reported at once (the pool
    itself would only retry, with back-off, while requests wait)."""

    @classmethod
    def connect(cls, *args, **kwargs):
        try:
            return super().connect(*args, **kwargs)
        except psycopg.OperationalError:
            report()
            raise

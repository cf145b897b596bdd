"""What a running run holds while it works, so that a run left "running" by a worker that died
(SIGKILL, OOM, a lost machine) can be told from one still at work and taken over. One home for
every kind of run (extraction runs, job runs).

On a direct connection (`MEMORYHUB_DB_POOL_MODE=session`, the default) it is a session-level
advisory lock: PostgreSQL drops it with the dead worker's connection, so a takeover can follow
at once. Behind a transaction-mode pooler a session lock means nothing (an unlock lands on
another server connection and the lock leaks; a second try on the same one succeeds), so there
it is a leased claim: a `RunLease` row with the holder's token and an expiry, renewed by the
holder while it works (`kept`) and free for another once it expires
(docs/operations.md#behind-a-connection-pooler). Lease times are the database's clock, one for
every node; `clock` lets a test pin them.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from django.conf import settings
from django.db import connection, connections

from memories.models import RunLease
from memoryhub.pooling import transaction_pooled

log = logging.getLogger(__name__)

# The lease times' clock: None is the database's (`clock_timestamp()`); tests pin a time.
clock: Callable[[], datetime | None] = lambda: None  # noqa: E731
_NOW = "COALESCE(%s::timestamptz, clock_timestamp())"


class Liveness:
    """The liveness of one kind of run, keyed by run id (`namespace` tells the kinds apart)."""

    def __init__(self, namespace: int) -> None:
        self.namespace = namespace
        self._tokens: dict[int, str] = {}  # the leases this process holds, by run id

    def try_hold(self, run_id: int) -> bool:
        """Hold the run's liveness unless a live worker (this process included) holds it."""
        if not transaction_pooled():
            return self._session("pg_try_advisory_lock", run_id)
        token = uuid.uuid4().hex
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {RunLease._meta.db_table} AS l (name, owner, until) "
                f"VALUES (%s, %s, {_NOW} + make_interval(secs => %s)) ON CONFLICT (name) DO UPDATE "
                f"SET owner = EXCLUDED.owner, until = EXCLUDED.until WHERE l.until < {_NOW} "
                "RETURNING owner",
                [self._name(run_id), token, clock(), self._ttl(), clock()],
            )
            taken = cursor.fetchone() is not None
        if taken:
            self._tokens[run_id] = token
        return taken

    def hold(self, run_id: int) -> None:
        """Hold the liveness of a run just created (no one else can hold it yet)."""
        if not transaction_pooled():
            self._session("pg_advisory_lock", run_id)
        elif not self.try_hold(run_id):
            raise RuntimeError(f"run {run_id} is held already")

    def renew(self, run_id: int) -> bool:
        """Extend this process's lease of the run; False when it is no longer ours (it expired
        and another worker took the run over). Nothing to do on a session lock."""
        token = self._tokens.get(run_id)
        if not transaction_pooled() or token is None:
            return not transaction_pooled()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {RunLease._meta.db_table} SET until = {_NOW} + make_interval(secs => %s) "
                "WHERE name = %s AND owner = %s",
                [clock(), self._ttl(), self._name(run_id), token],
            )
            return cursor.rowcount == 1

    def release(self, run_id: int) -> None:
        """Let go of the run's liveness (an unheld one: nothing happens)."""
        if not transaction_pooled():
            self._session("pg_advisory_unlock", run_id)
            return
        token = self._tokens.pop(run_id, None)
        if token is not None:
            RunLease.objects.filter(name=self._name(run_id), owner=token).delete()

    @contextmanager
    def kept(self, run_id: int) -> Iterator[None]:
        """While the block runs, a thread renews the lease every third of its term (nothing
        to renew on a session lock: its connection holds it)."""
        if not transaction_pooled():
            yield
            return
        stop = threading.Event()
        renewer = threading.Thread(
            target=self._renew_until, args=(run_id, stop), name=f"lease-{run_id}", daemon=True
        )
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join()

    def _renew_until(self, run_id: int, stop: threading.Event) -> None:
        try:
            while not stop.wait(settings.MEMORYHUB_RUN_LEASE_SECONDS / 3):
                try:
                    if not self.renew(run_id):
                        log.error("run %s: its lease was lost (taken over after expiry)", run_id)
                        return
                except Exception as exc:  # noqa: BLE001 - the database may be down: try again
                    log.warning("run %s: lease renewal failed: %s", run_id, exc)
        finally:
            connections.close_all()  # this thread's own connections

    def _name(self, run_id: int) -> str:
        return f"{self.namespace:x}:{run_id}"

    @staticmethod
    def _ttl() -> float:
        return float(settings.MEMORYHUB_RUN_LEASE_SECONDS)

    def _session(self, function: str, run_id: int) -> bool:
        """`function` (`pg_advisory_lock`, `pg_try_advisory_lock`, `pg_advisory_unlock`) on the
        session-level advisory lock (`namespace`, `run_id`). False when a try or an unlock did
        not take."""
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {function}(%s::int, %s::int)", [self.namespace, run_id % 2**31])
            return cursor.fetchone()[0] is not False

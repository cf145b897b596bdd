"""Lock waits seen from another connection, for tests that hold a race open without timing."""

from __future__ import annotations

from django.db import connection


def waiting_for_a_lock(pid: int) -> bool:
    """Whether the PostgreSQL backend `pid` is queued on a lock it has not been granted."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = %s AND NOT granted)", [pid]
        )
        return cursor.fetchone()[0]

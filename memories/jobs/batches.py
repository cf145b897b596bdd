"""What the batch jobs share: batch sizes, progress reporting, one-statement-per-batch SQL."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

# Rows per batch: large enough to amortise a round trip, small enough that one batch holds its
# row locks for well under a second and a killed worker loses at most one uncommitted batch.
DEFAULT_BATCH_SIZE = 5000

Progress = Callable[[str], None]

# Where keyset cursors over timestamps start.
BEGINNING = datetime(1, 1, 1, tzinfo=UTC)


def report(progress: Progress | None, message: str) -> None:
    if progress is not None:
        progress(message)


def batch_execute(sql: str, params: dict[str, Any] | Sequence[Any]) -> tuple:
    """Run one batch statement in its own transaction and return its single result row.

    A worker killed mid-batch leaves nothing half-applied: PostgreSQL rolls the transaction back
    and releases its row locks, and the next run picks those rows up again.
    """
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params: dict[str, Any] | Sequence[Any] = ()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetch_value(sql: str, params: dict[str, Any] | Sequence[Any] = ()) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row else None

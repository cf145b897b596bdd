"""Reaching PostgreSQL through a transaction-mode connection pooler
(`MEMORYHUB_DB_POOL_MODE=transaction`; docs/operations.md#behind-a-connection-pooler): each
transaction may run on another server connection, so nothing of a session is relied on
between transactions."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

from django.conf import settings
from django.db import transaction
from django.db.models import Model, QuerySet

M = TypeVar("M", bound=Model)


def transaction_pooled() -> bool:
    """Whether the database is reached through a transaction-mode pooler."""
    return settings.MEMORYHUB_DB_POOL_MODE == "transaction"


def stream_rows(rows: QuerySet[M], chunk_size: int) -> Iterator[M]:
    """`rows` read `chunk_size` at a time from a server-side cursor. Behind a transaction-mode
    pooler the cursor lives in a transaction held while the rows are read (outside one, Django's
    cursor is kept by the session, and the next fetch may reach another server connection)."""
    if not transaction_pooled():
        yield from rows.iterator(chunk_size)
        return
    with transaction.atomic():
        yield from rows.iterator(chunk_size)

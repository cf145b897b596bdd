"""Statements run with a plan mode of their own choosing."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

from django.db import connection, transaction

from memoryhub import pipeline

# The generic plan for the rest of the transaction (SET LOCAL warns outside an explicit one).
GENERIC_PLAN_SQL = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"


def generic_plan_rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """The rows of a statement run with its generic plan, planned once per connection (`auto`
    planned the exact ranking per request: a third of its time). Outside a transaction, with
    pipelining, the setting goes with it (`memoryhub.pipeline`: one round trip, one implicit
    transaction); else `SET LOCAL` in a transaction, set back after in a caller's. Without
    prepared statements (`MEMORYHUB_DB_PREPARE=0`) a generic plan would be made every time."""
    planned = connection.settings_dict["OPTIONS"].get("prepare_threshold") is not None
    outer = connection.in_atomic_block
    if not planned or (pipeline.enabled() and not outer):
        with connection.cursor() as cursor:
            with pipeline.pipelined() if planned else nullcontext():
                if planned:
                    cursor.execute(GENERIC_PLAN_SQL)
                cursor.execute(sql, params)
            rows: list[tuple[Any, ...]] = cursor.fetchall()  # the last statement's
        return rows
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(sql, params)
        rows = cursor.fetchall()
        if outer:  # after an error the caller's transaction is rolled back, the SET with it
            cursor.execute("SET LOCAL plan_cache_mode TO DEFAULT")
    return rows

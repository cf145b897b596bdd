"""Statements sent together (`memoryhub.pipeline.pipelined`): one round trip for the block, each
statement still run in order with its own answer; an error comes out at the block's end as
Django's exception, and a transaction or savepoint around the block behaves as without it."""

from __future__ import annotations

from contextlib import nullcontext

import pytest
from django.db import IntegrityError, connection, transaction

from memoryhub.pipeline import in_pipeline, pipelined
from tests.support.round_trips import round_trips


@pytest.fixture(autouse=True)
def _pipelining(settings):
    settings.MEMORYHUB_DB_PIPELINE = True


@pytest.fixture
def table():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMP TABLE piped (id int PRIMARY KEY)")
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS piped")


def _count() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM piped")
        return cursor.fetchone()[0]


def _inserts(table: str, ids: list[int], *, savepoint: bool = False) -> None:
    """Inserts `ids` into `table`, one statement each, in one pipeline (in a savepoint)."""
    with transaction.atomic() if savepoint else nullcontext(), pipelined():
        for memory_id in ids:
            with connection.cursor() as cursor:
                cursor.execute(f"INSERT INTO {table} VALUES (%s)", [memory_id])


@pytest.mark.django_db
def test_the_block_is_one_round_trip_and_its_cursors_are_read_after_it(table):
    first, second = connection.cursor(), connection.cursor()
    with round_trips() as trips, pipelined():
        assert in_pipeline()
        first.execute("INSERT INTO piped VALUES (%s), (%s) RETURNING id", [1, 2])
        second.execute("SELECT count(*) FROM piped WHERE id > %s", [0])  # sees the insert
    assert trips.statements == [2]
    assert not in_pipeline()
    assert sorted(first.fetchall()) == [(1,), (2,)]
    assert second.fetchone() == (2,)


@pytest.mark.django_db
def test_an_integrity_error_rolls_back_its_savepoint_only(table):
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO piped VALUES (1)")
    with pytest.raises(IntegrityError):
        _inserts("piped", [2, 1, 3], savepoint=True)  # 1 is taken: 3 is never inserted
    # The test's transaction goes on: the savepoint took the block's rows with it.
    assert _count() == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM piped WHERE id IN (2, 3)")
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_block_is_one_implicit_transaction():
    """A local setting holds for the block's next statements and not after it; an error undoes
    the block's earlier writes too."""
    assert not connection.in_atomic_block
    setting = connection.cursor()
    with pipelined():
        connection.cursor().execute(
            "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
        )
        setting.execute("SELECT current_setting('plan_cache_mode')")
    assert setting.fetchone() == ("force_generic_plan",)
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('plan_cache_mode')")
        assert cursor.fetchone() == ("auto",)
        cursor.execute("CREATE TABLE piped_autocommit (id int PRIMARY KEY)")
    try:
        with pytest.raises(IntegrityError):
            _inserts("piped_autocommit", [1, 1])
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM piped_autocommit")
            assert cursor.fetchone() == (0,)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE piped_autocommit")


@pytest.mark.django_db
def test_switched_off_each_statement_goes_alone_and_is_read_the_same(table, settings):
    settings.MEMORYHUB_DB_PIPELINE = False
    first, second = connection.cursor(), connection.cursor()
    with round_trips() as trips, pipelined():
        assert not in_pipeline()
        first.execute("INSERT INTO piped VALUES (%s), (%s) RETURNING id", [1, 2])
        second.execute("SELECT count(*) FROM piped WHERE id > %s", [0])
    assert trips.statements == [1, 1]
    assert sorted(first.fetchall()) == [(1,), (2,)]
    assert second.fetchone() == (2,)

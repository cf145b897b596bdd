"""A search over a small scope (`search.EXACT_SCOPE` memories at most) runs the exact ranking
statement at once, with the shape's constants written in and its generic plan (planned once per
connection, not per request); a larger scope walks the HNSW index first, planned for the
request. The scope's size is counted once and remembered by the process for a while."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories.retrieval import search
from memories.retrieval.search import memory_search
from memories.services.store import memory_store
from tests.factories import make_agent


def put(principal, text):
    return memory_store(principal=principal, data={"text": text, "dedup_policy": "insert"})


def ask(principal, query="parcels at the depot", mode="hybrid"):
    result = memory_search(principal=principal, data={"query": query, "mode": mode})
    return [hit["id"] for hit in result["memories"]]


def _sql(ctx) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries]


@pytest.fixture(autouse=True)
def _fresh_sizes():
    search._scope_sizes.clear()
    yield
    search._scope_sizes.clear()


@pytest.fixture
def me(tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    for i in range(30):
        put(principal, f"Shipping note {i}: parcels leave the depot at dawn, route {i % 7}.")
    return principal


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_a_small_scope_is_ranked_by_the_exact_statement_alone(me, monkeypatch, mode):
    monkeypatch.setattr(search, "EXACT_SCOPE", 0)
    walked = ask(me, mode=mode)
    monkeypatch.setattr(search, "EXACT_SCOPE", 100)
    with CaptureQueriesContext(connection) as ctx:
        exact = ask(me, mode=mode)
    assert exact == walked and len(exact) == 10
    statements = _sql(ctx)
    assert "SET LOCAL plan_cache_mode = force_generic_plan" in statements
    rankings = [sql for sql in statements if sql.startswith("WITH ranked")]
    assert len(rankings) == 1
    # The exact statement: no HNSW count row, and the scope's constants written in.
    assert "count(*)::float8 AS relevance" not in rankings[0]
    assert "'active'" in rankings[0]


@pytest.mark.django_db
def test_a_scope_larger_than_the_bound_walks_the_index_first(me, monkeypatch):
    monkeypatch.setattr(search, "EXACT_SCOPE", 20)  # the scope holds 30
    with CaptureQueriesContext(connection) as ctx:
        ask(me)
    statements = _sql(ctx)
    assert not any("plan_cache_mode" in sql for sql in statements)
    rankings = [sql for sql in statements if sql.startswith("WITH ranked")]
    assert "count(*)::float8 AS relevance" in rankings[0]  # the HNSW statement's count row
    # (30 memories, fewer than a search's depth: the exact statement completes the walk.)
    assert len(rankings) == 2 and "count(*)::float8 AS relevance" not in rankings[1]


@pytest.mark.django_db
def test_the_plan_mode_goes_back_inside_the_callers_transaction(me, monkeypatch):
    """pytest-django holds the test in a transaction: the SET LOCAL must not outlive the search."""
    monkeypatch.setattr(search, "EXACT_SCOPE", 100)
    assert connection.in_atomic_block
    ask(me)
    with connection.cursor() as cursor:
        cursor.execute("SHOW plan_cache_mode")
        assert cursor.fetchone()[0] == "auto"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("pipelining", [True, False], ids=["pipelined", "apart"])
def test_the_exact_statement_runs_its_generic_plan(
    tenant, agent, monkeypatch, settings, pipelining
):
    """Once psycopg prepares it (its sixth run on the connection), PostgreSQL runs the generic
    plan it made once, and plans no custom one: with its plan mode set in a transaction, or sent
    with it (`memoryhub.pipeline`) for the implicit transaction both run in."""
    settings.MEMORYHUB_DB_PIPELINE = pipelining
    monkeypatch.setattr(search, "EXACT_SCOPE", 100)
    me = Principal(tenant=tenant, agent=agent)
    for i in range(12):
        put(me, f"Shipping note {i}: parcels leave the depot at dawn.")
    for i in range(8):
        assert ask(me, query=f"parcels depot {i}")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE 'WITH ranked AS MATERIALIZED%%'"
        )
        [(generic, custom)] = cursor.fetchall()
    assert generic >= 1 and custom == 0


@pytest.mark.django_db
def test_without_prepared_statements_no_plan_mode_is_set(me, monkeypatch):
    """`MEMORYHUB_DB_PREPARE=0` (behind a transaction-mode pooler): a generic plan would be made
    for every run, so the statement runs as any other."""
    monkeypatch.setattr(search, "EXACT_SCOPE", 100)
    options = dict(connection.settings_dict["OPTIONS"])
    options.pop("prepare_threshold", None)
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    with CaptureQueriesContext(connection) as ctx:
        assert ask(me)
    assert not any("plan_cache_mode" in sql for sql in _sql(ctx))


@pytest.mark.django_db
def test_the_size_is_counted_once_then_again_when_it_is_stale(me, monkeypatch):
    monkeypatch.setattr(search, "EXACT_SCOPE", 100)
    clock = [1000.0]
    monkeypatch.setattr(search, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def counts() -> int:
        with CaptureQueriesContext(connection) as ctx:
            ask(me)
        return sum(sql.startswith("SELECT count(*) FROM (SELECT") for sql in _sql(ctx))

    assert counts() == 1
    assert counts() == 0
    clock[0] += search.SCOPE_SIZE_TTL + 1
    assert counts() == 1


def _exact(principal, **body) -> bool:
    """Whether this search ran the exact statement (its generic plan's SET) at once."""
    with CaptureQueriesContext(connection) as ctx:
        memory_search(principal=principal, data={"query": "parcels at the depot", **body})
    return "SET LOCAL plan_cache_mode = force_generic_plan" in _sql(ctx)


@pytest.mark.django_db
def test_the_size_is_the_scope_of_the_request(tenant, me, monkeypatch):
    """Another agent's scope, or a filtered one, is counted for itself: it is not taken for the
    first agent's, nor the first agent's for it."""
    monkeypatch.setattr(search, "EXACT_SCOPE", 20)  # `me` holds 30
    other = Principal(tenant=tenant, agent=make_agent(tenant, "small-bot"))
    for i in range(5):
        put(other, f"Parcel {i} waits at the depot.")
    for _ in range(2):  # counted, then remembered
        assert not _exact(me)
        assert _exact(other)
        assert _exact(me, thread_id="t-9")  # no memory in that thread: an empty scope
        assert _exact(me, categories=["preference"])
        assert not _exact(me, categories=["core"])  # the same shape, another scope: all 30
    assert len(search._scope_sizes) == 5


@pytest.mark.django_db
def test_the_count_reads_past_whatever_bound_is_set(me, monkeypatch):
    """The count stops one row past the bound it was compiled for: with another bound it is
    compiled again, or a 30-memory scope would count as 21 and pass for small under 25."""
    monkeypatch.setattr(search, "EXACT_SCOPE", 20)
    assert not _exact(me)
    monkeypatch.setattr(search, "EXACT_SCOPE", 25)
    assert not _exact(me)
    monkeypatch.setattr(search, "EXACT_SCOPE", 30)
    assert _exact(me)

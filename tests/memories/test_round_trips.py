"""The statements (each a round trip to PostgreSQL, and its parse/plan/execute) of the three
requests of the mixed load, pinned as a request runs them (issue #32, docs/performance.md
"Where a request's CPU goes"): a store, a store that updates by key, a hybrid search. The
HNSW scan settings are each connection's from its start (`memoryhub.hnsw`), and a revision's
events ride on its INSERT."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories.retrieval import search
from memories.retrieval.ranking import DEPTH
from memories.services.store import memory_store
from memoryhub import hnsw
from tests.support.round_trips import round_trips

# What each statement is, by how it starts.
KINDS = [
    ("BEGIN", "BEGIN"),
    ("COMMIT", "COMMIT"),
    ("SAVEPOINT", "SAVEPOINT"),
    ("RELEASE", "RELEASE SAVEPOINT"),
    ("plan mode", "SET LOCAL plan_cache_mode = force_generic_plan"),
    ("generic plan", "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"),
    ("SET LOCAL", "SET LOCAL"),
    ("key lookup", 'SELECT k."id"'),
    # The write's announcement (`horizon.announcement`) rides on the kind guard.
    (
        "announced kind guard + cap lock",
        re.compile(r"SELECT v, pg_advisory_xact_lock_shared\([^)]*\), pg_advisory_xact_lock\("),
    ),
    ("announced kind guard", "SELECT v, pg_advisory_xact_lock_shared("),
    ("kind guard + cap lock", "SELECT v, pg_advisory_xact_lock("),
    ("kind guard", "SELECT v FROM memory_kind_guard("),
    ("look-alikes", "(SELECT id, tenant_id"),
    ("cap lock", "SELECT pg_advisory_xact_lock("),
    ("write announced", "SELECT pg_advisory_xact_lock_shared("),
    ("memory + revision + events", 'WITH along0 AS (INSERT INTO "memories_memory" '),
    ("revision + events", "WITH along0 AS (INSERT INTO memories_event"),
    ("cap count", "SELECT active FROM memories_ownercount"),
    ("slot read", 'SELECT "memories_memory"."id", "memories_memory"."tenant_id"'),
    ("UPDATE", 'UPDATE "memories_memory" SET "category"'),
    ("ranking with its hit rows", "WITH ranked AS MATERIALIZED (WITH kw_lex AS MATERIALIZED"),
    ("scope size", "SELECT count(*) FROM (SELECT"),
    ("keyword branch", "WITH kw_lex AS MATERIALIZED"),
]


def _starts(sql: str, start: str | re.Pattern[str]) -> bool:
    return sql.startswith(start) if isinstance(start, str) else start.match(sql) is not None


def _kinds(captured) -> list[str]:
    out = []
    for query in captured:
        sql = re.sub(r"\s+", " ", query["sql"]).strip()
        out.append(next((name for name, start in KINDS if _starts(sql, start)), sql[:60]))
    return out


@pytest.fixture
def seeded(settings, api_client, tenant, agent):
    settings.MEMORYHUB_ACCESS_BUMP = "off"  # deferred in a server: off the request path
    settings.MEMORYHUB_DB_PIPELINE = True  # a database on another host (`memoryhub.pipeline`)
    # More vectors than a search's depth: the HNSW walk is not followed by the exact scan that
    # a scope smaller than the depth gets (`ranking.run_ranking`).
    me = Principal(tenant=tenant, agent=agent)
    for i in range(DEPTH + 5):
        memory_store(
            principal=me, data={"text": f"Seeded fact number {i}.", "dedup_policy": "insert"}
        )
    for i in range(3):  # warms the registry's cache and the compiled statements
        api_client.post("/api/v1/memories", {"text": f"Warm-up fact {i}."}, format="json")
        api_client.post("/api/v1/search", {"query": "fact", "mode": "hybrid"}, format="json")
    api_client.post("/api/v1/memories", {"text": "Plan A", "key": "plan"}, format="json")
    return api_client


def _statements(request) -> list[str]:
    with CaptureQueriesContext(connection) as ctx:
        response = request()
    assert response.status_code in (200, 201), response.content
    return _kinds(ctx.captured_queries)


@pytest.mark.django_db(transaction=True)
def test_store_statements(seeded):
    kinds = _statements(
        lambda: seeded.post("/api/v1/memories", {"text": "Bob flies to Rome."}, format="json")
    )
    assert kinds == [
        "key lookup",
        "BEGIN",
        "announced kind guard + cap lock",
        "look-alikes",
        "memory + revision + events",
        "cap count",
        "COMMIT",
    ]


def _trips(request) -> list[int]:
    """The round trips of a request: how many statements each sent."""
    with round_trips() as trips:
        response = request()
    assert response.status_code in (200, 201), response.content
    return trips.statements


@pytest.mark.django_db(transaction=True)
def test_store_round_trips(seeded):
    """The key lookup, the BEGIN (psycopg sends it alone), the kind guard with the look-alikes
    (`memoryhub.pipeline`), the insert with the cap count, the COMMIT."""
    trips = _trips(
        lambda: seeded.post("/api/v1/memories", {"text": "Eve flies to Lima."}, format="json")
    )
    assert trips == [1, 1, 2, 2, 1]


@pytest.mark.django_db(transaction=True)
def test_small_scope_search_round_trips(seeded):
    """The key lookup; the generic plan's setting with the exact ranking and its hit rows, sent
    together outside a transaction."""
    trips = _trips(
        lambda: seeded.post(
            "/api/v1/search", {"query": "Warm-up fact", "mode": "hybrid"}, format="json"
        )
    )
    assert trips == [1, 2]


@pytest.mark.django_db(transaction=True)
def test_without_pipelining_each_statement_is_a_round_trip(seeded, settings):
    """`MEMORYHUB_DB_PIPELINE=0` (a database on this host): the same statements, one round trip
    each; a small scope's plan mode is set in a transaction of its own."""
    settings.MEMORYHUB_DB_PIPELINE = False
    store = _trips(
        lambda: seeded.post("/api/v1/memories", {"text": "Eve flies to Rio."}, format="json")
    )
    assert store == [1] * 7
    search = _trips(
        lambda: seeded.post(
            "/api/v1/search", {"query": "Warm-up fact", "mode": "hybrid"}, format="json"
        )
    )
    assert search == [1] * 5  # key lookup, BEGIN, plan mode, ranking, COMMIT


@pytest.mark.django_db(transaction=True)
def test_keyed_update_statements(seeded):
    kinds = _statements(
        lambda: seeded.post("/api/v1/memories", {"text": "Plan B", "key": "plan"}, format="json")
    )
    assert kinds == [
        "key lookup",
        "BEGIN",
        "announced kind guard",
        "look-alikes",
        "slot read",
        "SAVEPOINT",
        "UPDATE",
        "revision + events",
        "RELEASE",
        "COMMIT",
    ]


@pytest.mark.django_db(transaction=True)
def test_hybrid_search_statements(seeded):
    """A small scope (`search.EXACT_SCOPE`, its size known from the warm-up's count): the exact
    statement with its generic plan, set for the implicit transaction both run in (sent
    together, `memoryhub.pipeline`: no BEGIN, no COMMIT)."""
    kinds = _statements(
        lambda: seeded.post(
            "/api/v1/search", {"query": "Warm-up fact", "mode": "hybrid"}, format="json"
        )
    )
    assert kinds == ["key lookup", "generic plan", "ranking with its hit rows"]


@pytest.mark.django_db(transaction=True)
def test_hybrid_search_statements_over_a_large_scope(seeded, monkeypatch):
    """A scope larger than `search.EXACT_SCOPE`: the HNSW statement, planned for the request."""
    monkeypatch.setattr(search, "EXACT_SCOPE", DEPTH)
    search._scope_sizes.clear()
    body = {"query": "Warm-up fact", "mode": "hybrid"}
    first = _statements(lambda: seeded.post("/api/v1/search", body, format="json"))
    assert first == ["key lookup", "scope size", "ranking with its hit rows"]
    again = _statements(lambda: seeded.post("/api/v1/search", body, format="json"))
    assert again == ["key lookup", "ranking with its hit rows"]  # the size is remembered


@pytest.mark.django_db(transaction=True)
def test_hybrid_search_statements_with_its_branches_at_once(seeded, monkeypatch):
    """A large scope where the branches may run apart (a server's pool and branch threads): on
    the request's connection the keyword branch, then the mixing with its hit rows; the HNSW
    walk runs on a branch thread's connection meanwhile."""
    monkeypatch.setattr(search, "EXACT_SCOPE", DEPTH)
    monkeypatch.setattr(search, "branches_allowed", lambda: True)
    search._scope_sizes.clear()
    body = {"query": "Warm-up fact", "mode": "hybrid"}
    first = _statements(lambda: seeded.post("/api/v1/search", body, format="json"))
    assert first == ["key lookup", "scope size", "keyword branch", "ranking with its hit rows"]
    with CaptureQueriesContext(connection) as ctx:
        assert seeded.post("/api/v1/search", body, format="json").status_code == 200
    assert _kinds(ctx.captured_queries) == [
        "key lookup",
        "keyword branch",
        "ranking with its hit rows",
    ]
    mixing = ctx.captured_queries[-1]["sql"]
    assert "kw_sets" not in mixing and "AS k(id, kw_score)" in mixing


@pytest.mark.django_db(transaction=True)
def test_without_session_settings_each_walk_sets_them(seeded, settings, monkeypatch):
    """Behind a transaction-mode pooler (`MEMORYHUB_DB_SESSION_SETTINGS=0`) the connection holds
    no settings of ours: every HNSW walk sets them for its transaction, as before."""
    settings.MEMORYHUB_DB_SESSION_SETTINGS = False
    monkeypatch.setattr(search, "EXACT_SCOPE", 0)  # the HNSW walk, whatever the scope's size
    searched = _statements(
        lambda: seeded.post(
            "/api/v1/search", {"query": "Warm-up fact", "mode": "hybrid"}, format="json"
        )
    )
    assert searched == [
        "key lookup",
        "BEGIN",
        "SET LOCAL",
        "ranking with its hit rows",
        "COMMIT",
    ]
    store = _statements(
        lambda: seeded.post("/api/v1/memories", {"text": "Ann flies to Oslo."}, format="json")
    )
    # The look-alikes go out with the kind guard (`memoryhub.pipeline`): their settings as two
    # statements, in the same round trip.
    assert store[:6] == [
        "key lookup",
        "BEGIN",
        "announced kind guard + cap lock",
        "SET LOCAL",
        "SET LOCAL",
        "look-alikes",
    ]


@pytest.mark.django_db
def test_connections_hold_the_hnsw_settings():
    with connection.cursor() as cursor:
        cursor.execute("SELECT '[1,2]'::vector")  # pgvector's library loaded
        cursor.execute("SHOW hnsw.iterative_scan")
        assert cursor.fetchone()[0] == hnsw.ITERATIVE_SCAN
        cursor.execute("SHOW hnsw.ef_search")
        assert int(cursor.fetchone()[0]) == hnsw.EF_SEARCH


def test_a_deeper_walk_sets_its_own_candidate_list(settings):
    settings.MEMORYHUB_DB_SESSION_SETTINGS = True
    assert hnsw.local_settings_sql(40) is None
    assert hnsw.local_settings_sql(hnsw.EF_SEARCH) is None
    assert "hnsw.ef_search = 150" in hnsw.local_settings_sql(150)
    settings.MEMORYHUB_DB_SESSION_SETTINGS = False
    assert "hnsw.iterative_scan = relaxed_order" in hnsw.local_settings_sql(40)
    assert "hnsw.ef_search = 100" in hnsw.local_settings_sql(40)

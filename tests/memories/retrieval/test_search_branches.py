"""A hybrid search over a large scope runs its two branches at once on two connections (the
keyword branch on the request's, the semantic one on a branch thread's), then mixes them in a
third statement (`ranking.run_branches`, `ranking.fusion_sql`): the same ranking as the one
statement that runs them one after the other. Inside a transaction, without the connection pool
or with every branch thread busy, a search runs the one statement."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.principal import Principal
from memories.embeddings import get_embedder
from memories.retrieval import ranking, search
from memories.retrieval.params import parse_search
from memories.retrieval.search import memory_search
from memories.services.store import memory_store

WORDS = [
    "parcel depot dawn route truck",
    "invoice customer refund march",
    "garden tomato rain sunday",
    "piano lesson teacher tuesday",
    "flight paris hotel booking",
    "dentist appointment friday",
]
QUERIES = [
    "when does the truck leave the depot",
    "what did Maria say about the refund in March",
    "piano teacher",
    "hotel in Paris",
    "tomato garden after the rain",
    "the the of",  # only stop words: no keyword branch rows
]


def put(principal, i):
    words = WORDS[i % len(WORDS)].split()
    text = f"Note {i}: {words[i % 5 % len(words)]} and {words[(i + 2) % len(words)]}"
    if i % 4 == 0:
        text += f", said Maria on {3 + i % 20} March 2024"
    data = {"text": text, "dedup_policy": "insert"}
    if i % 3 == 0:
        data["thread_id"] = f"talk-{i % 5}"
        data["category"] = "notes"
    return memory_store(principal=principal, data=data)


def ask(principal, query, **body):
    result = memory_search(principal=principal, data={"query": query, "mode": "hybrid", **body})
    return [(hit["id"], hit["quality"]["relevance"]) for hit in result["memories"]]


@pytest.fixture
def me(tenant, agent, monkeypatch, settings):
    monkeypatch.setattr(search, "EXACT_SCOPE", 0)  # every scope is large
    # A search's access bumps rewrite its hits' rows, and an exact scan meets rows in the order
    # they lie: vectors at the same distance at the depth's edge (hashing vectors with no word of
    # the query) would be taken otherwise by the next search, its candidates' neighbours with
    # them. Without bumps, the two searches compared see the same table.
    settings.MEMORYHUB_ACCESS_BUMP = "off"
    search._scope_sizes.clear()
    principal = Principal(tenant=tenant, agent=agent)
    for i in range(90):
        put(principal, i)
    return principal


def _split(monkeypatch, on: bool):
    monkeypatch.setattr(search, "branches_allowed", lambda: on)


def _take_every_slot(slots):
    """Every branch slot, each waited for a while: a branch gives its slot back in its future's
    callback, which runs just after the future's waiters are woken."""
    for _ in range(settings.MEMORYHUB_SEARCH_BRANCH_THREADS):
        assert slots.acquire(timeout=10)


def _give_every_slot(slots):
    for _ in range(settings.MEMORYHUB_SEARCH_BRANCH_THREADS):
        slots.release()


def _rankings(ctx) -> list[str]:
    return [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("WITH")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("body", [{}, {"limit": 25}, {"min_score": 0.3}, {"thread_id": "talk-0"}])
def test_the_branches_run_apart_give_the_one_statements_ranking(me, monkeypatch, body):
    found = 0
    for query in QUERIES:
        _split(monkeypatch, False)
        whole = ask(me, query, **body)
        _split(monkeypatch, True)
        with CaptureQueriesContext(connection) as ctx:
            split = ask(me, query, **body)
        # Memories of relevance 0 (no query word, a vector at 90° or more) tie, and which of
        # them fill a list is the order a scan met them in; every other hit is the same.
        assert [mid for mid, r in split if r > 0] == [mid for mid, r in whole if r > 0], query
        assert [r for _, r in split] == pytest.approx([r for _, r in whole], abs=1e-9)
        # On this connection: the keyword branch and the mixing. The HNSW walk ran elsewhere.
        statements = _rankings(ctx)
        assert len(statements) == 2, query
        assert "kw_sets AS MATERIALIZED" in statements[0] and "<=>" not in statements[0]
        assert "AS k(id, kw_score)" in statements[1] and "kw_sets" not in statements[1]
        found += bool(whole)
    assert found >= 4


@pytest.mark.django_db(transaction=True)
def test_the_semantic_branch_runs_on_another_connection_at_the_same_time(me, monkeypatch):
    """The branch thread's statement starts before the keyword branch ends: both wait at a
    barrier that only two connections running at once can pass."""
    _split(monkeypatch, True)
    barrier = threading.Barrier(2, timeout=10)
    seen = []
    semantic, keyword = ranking._semantic_rows, ranking.run_branches

    def semantic_rows(statement, depth):
        seen.append((threading.get_ident(), connection.cursor().connection.info.backend_pid))
        barrier.wait()
        return semantic(statement, depth)

    def run_branches(keyword_statement, semantic_statement, fuse, *, depth):
        def first():
            barrier.wait()
            seen.append((threading.get_ident(), connection.cursor().connection.info.backend_pid))
            return keyword_statement()

        return keyword(first, semantic_statement, fuse, depth=depth)

    monkeypatch.setattr(ranking, "_semantic_rows", semantic_rows)
    monkeypatch.setattr(search, "run_branches", run_branches)
    assert ask(me, QUERIES[0])
    (thread_a, pid_a), (thread_b, pid_b) = seen
    assert thread_a != thread_b and pid_a != pid_b


@pytest.mark.django_db(transaction=True)
def test_with_every_branch_thread_busy_the_search_runs_one_statement(me, monkeypatch):
    _split(monkeypatch, True)
    _, slots = ranking._branch_pool()
    _take_every_slot(slots)
    try:
        with CaptureQueriesContext(connection) as ctx:
            assert ask(me, QUERIES[0])
    finally:
        _give_every_slot(slots)
    statements = _rankings(ctx)
    assert len(statements) == 1 and "<=>" in statements[0] and "kw_sets" in statements[0]
    # ...and a search after them gets a slot again.
    with CaptureQueriesContext(connection) as ctx:
        assert ask(me, QUERIES[0])
    assert len(_rankings(ctx)) == 2


@pytest.mark.django_db(transaction=True)
def test_a_failed_keyword_branch_waits_for_the_other_and_frees_its_slot(me, monkeypatch):
    _split(monkeypatch, True)
    _, slots = ranking._branch_pool()
    done = []
    semantic = ranking._semantic_rows

    def semantic_rows(statement, depth):
        rows = semantic(statement, depth)
        done.append(len(rows))
        return rows

    monkeypatch.setattr(ranking, "_semantic_rows", semantic_rows)

    def broken():
        raise RuntimeError("keyword branch failed")

    with pytest.raises(RuntimeError):
        ranking.run_branches(broken, lambda exact: ("SELECT 'x', 0.5", []), None, depth=1)
    assert done == [1]  # it had finished when the error came out
    _take_every_slot(slots)  # its slot came back
    _give_every_slot(slots)


@pytest.mark.django_db(transaction=True)
def test_branches_need_the_pool_and_no_transaction(monkeypatch, settings):
    options = dict(connection.settings_dict["OPTIONS"])
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    assert not ranking.branches_allowed()  # the tests' connections are not pooled
    # (The pool's option is set only around the checks: Django would use it to connect.)
    with transaction.atomic():  # another connection would not see this transaction's writes
        options["pool"] = {"min_size": 1}
        assert not ranking.branches_allowed()
        del options["pool"]
    options["pool"] = {"min_size": 1}
    try:
        assert ranking.branches_allowed()
        settings.MEMORYHUB_SEARCH_BRANCH_THREADS = 0
        assert not ranking.branches_allowed()
    finally:
        del options["pool"]


@pytest.mark.django_db
def test_a_small_scope_never_splits(me, monkeypatch):
    """The exact statement of a small scope is one cheap statement: nothing to run apart."""
    _split(monkeypatch, True)
    monkeypatch.setattr(search, "EXACT_SCOPE", 1000)
    with CaptureQueriesContext(connection) as ctx:
        assert ask(me, QUERIES[0])
    assert len(_rankings(ctx)) == 1


@pytest.mark.django_db
def test_a_candidates_keyword_score_is_computed_once(me):
    """The mixing scores a candidate the keyword branch did not return in a subquery of its
    own (OFFSET 0): pulled up, PostgreSQL computed it once for each of its three uses."""
    query = QUERIES[0]
    params = parse_search(me, {"query": query, "mode": "hybrid"})
    embedder = get_embedder()
    vector = embedder.embed([query])[0]
    statement, args, _ = search._ranking(
        me, params, timezone.now(), vector=vector, model=embedder.model_name
    )
    with connection.cursor() as cursor:
        cursor.execute(*statement(False, "keyword"))
        keyword = cursor.fetchall()
        cursor.execute(*statement(True, "semantic"))
        semantic = cursor.fetchall()
        sql, sql_params = ranking.fusion_sql(args, keyword, semantic)
        cursor.execute("EXPLAIN " + sql, sql_params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
        assert plan.count("CTE Scan on kw_lex") == 1
        cursor.execute("EXPLAIN " + sql.replace(" OFFSET 0) scored", ") scored"), sql_params)
        unfenced = "\n".join(row[0] for row in cursor.fetchall())
        assert unfenced.count("CTE Scan on kw_lex") == 3  # what the fence prevents

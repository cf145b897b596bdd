"""The keyword branch's score, and the bound on what it reads: a word held by many memories of
the scope (a common word) is read no further than `ranking.common_matches(depth)` matches."""

from __future__ import annotations

import json
import math

import pytest
from django.db import connection
from django.utils import timezone

from accounts.principal import Principal
from memories.retrieval import ranking
from memories.retrieval.params import parse_search
from memories.retrieval.ranking import RankingArgs, ranked_ids, ranking_sql
from memories.retrieval.search import search_scope
from memories.services.store import memory_store

WEIGHTS = "'{0.05, 0.2, 0.4, 0.1}'::float4[]"


@pytest.fixture
def me(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


def put(principal, text):
    data = {"text": text, "dedup_policy": "insert"}
    return memory_store(principal=principal, data=data).memory


def keyword(principal, query, limit=10):
    scope = search_scope(principal, parse_search(principal, {"query": query}), timezone.now())
    return ranked_ids(scope, query=query, vector=None, mode="keyword", limit=limit)


def lexemes(text: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", [text])
        return {row[0] for row in cursor.fetchall()}


def ts_rank(text: str, query: str) -> float:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT ts_rank({WEIGHTS}, setweight(to_tsvector('english', %s), 'A'), "
            "replace(plainto_tsquery('english', %s)::text, '&', '|')::tsquery)",
            [text, query],
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_keyword_score_is_the_idf_of_the_words_held_plus_ts_rank_over_every_match(me):
    texts = [
        "Maria adopted a grey cat named Pixel",
        "Maria waters the garden every morning",
        "The cat sleeps on the sofa",
        "Jonas repaired the garden fence",
        "Lunch with Jonas at the harbour",
        "The harbour ferry leaves at noon",
    ]
    memories = {put(me, text).pk: text for text in texts}
    query = "Maria cat garden"
    words = lexemes(query)
    held = {mid: lexemes(text) & words for mid, text in memories.items()}
    matches = {mid for mid, h in held.items() if h}
    df = {w: sum(1 for mid in matches if w in held[mid]) for w in words}

    def idf(word: str) -> float:
        return math.log(1 + (len(matches) - df[word] + 0.5) / (df[word] + 0.5))

    expected = {
        mid: s / (s + 3)
        for mid in matches
        for s in [sum(idf(w) for w in held[mid]) + 5 * ts_rank(memories[mid], query)]
    }
    found = dict(keyword(me, query))
    assert set(found) == matches
    for mid, relevance in found.items():
        assert relevance == pytest.approx(expected[mid], abs=1e-6), memories[mid]


def _kw_all_rows(plan: dict) -> int:
    """Rows of the `kw_all` CTE in an EXPLAIN (ANALYZE, FORMAT JSON) plan."""
    todo = [plan]
    while todo:
        node = todo.pop()
        if node.get("Subplan Name") == "CTE kw_all":
            return node["Actual Rows"]
        todo.extend(node.get("Plans", []))
    raise AssertionError("no kw_all in the plan")


def ranked_rows(principal, query: str) -> int:
    """How many memories the keyword branch of `query`'s statement ranked."""
    scope = search_scope(principal, parse_search(principal, {"query": query}), timezone.now())
    args = RankingArgs.of(query=query, vector=None, mode="keyword", limit=10)
    sql, params = ranking_sql(scope, args, exact=False)
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return _kw_all_rows(plan[0]["Plan"])


@pytest.mark.django_db
def test_a_common_word_is_read_no_further_than_the_cap(me, monkeypatch):
    coffee = [put(me, f"Coffee with oat milk, cup number {i}").pk for i in range(12)]
    rare = [put(me, f"Kumquat jam and coffee, jar {i}").pk for i in range(2)]
    query = "coffee kumquat"
    assert ranked_rows(me, query) == 14  # no common word: every match is ranked

    monkeypatch.setattr(ranking, "COMMON_MATCHES_PER_CANDIDATE", 0.1)
    cap = ranking.common_matches(ranking.DEPTH)
    assert cap == 4
    # Coffee is common now: the kumquat matches, and of those holding coffee only, what is left
    # of the `cap` coffee matches read (the kumquat ones hold coffee too).
    assert 2 < ranked_rows(me, query) <= 2 + cap
    found = [mid for mid, _ in keyword(me, query)]
    assert found[:2] == sorted(rare, key=found.index)
    assert 0 < len(found[2:]) <= cap and set(found[2:]) <= set(coffee)
    # A query of common words only still answers, from the bounded share.
    assert len(keyword(me, "coffee")) == cap

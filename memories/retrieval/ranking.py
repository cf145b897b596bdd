"""The ranking: memory ids by relevance to a query, computed inside PostgreSQL in one statement.

- keyword: full-text over the generated `search_vector`, with a tsquery that ORs the query's
  lexemes (stop words dropped, stemmed by the `english` config) — plainto_tsquery ANDs them,
  which finds nothing as soon as a question uses one word the memory lacks — scored by the
  BM25-style IDF of the lexemes each memory holds (counted over the matching memories) plus
  ts_rank;
- semantic: pgvector cosine distance through the HNSW index, with iterative index scans so a
  selective tenant/agent/subject filter still yields `depth` rows;
- hybrid: the top candidates of both lists, each re-scored by both signals and mixed linearly.

The scores, weights and depths were chosen on LoCoMo; README "Search quality" keeps the
experiment log, including the variants this replaced (reciprocal-rank fusion, min-max and
squashed normalisations, ts_rank without IDF).

`ranked_ids` ranks whatever scope it is given: agents' search and hydrate pass the visible
memories (`memories.retrieval.search.search_scope`), the console its tenant-wide queryset.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, FloatField, QuerySet, Value
from django.db.models.expressions import RawSQL
from pgvector.django import CosineDistance

from memories.embeddings import vector_literal
from memories.models import Memory

# Candidates taken from each list before fusing (at least the requested limit).
DEPTH = 40
# Candidates visited by the HNSW scan; iterative scans go further when filters drop rows.
EF_SEARCH = 100

# The OR tsquery, built inside PostgreSQL from the query text: every lexeme of
# to_tsvector('english', q) (so stop words are gone and words are stemmed), quoted, joined by |.
# NULL when the query has no lexeme (only stop words): the keyword branch is then empty.
TSQUERY_SQL = (
    "(SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery "
    "FROM unnest(to_tsvector('english'::regconfig, %s)))"
)
# Plain ts_rank (normalisation 0) ranked best on LoCoMo; length normalisations (1, 2, 32) and
# ts_rank_cd all ranked worse there (README "Search quality").
KEYWORD_RANK_SQL = "ts_rank(search_vector, " + TSQUERY_SQL + ")"
KEYWORD_MATCH_SQL = "search_vector @@ " + TSQUERY_SQL


def sql_with_params(qs: QuerySet) -> tuple[str, tuple]:
    """A queryset's SQL and parameters, to embed as a subquery of a hand-written statement."""
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def _keyword_matches(scope: QuerySet, query: str) -> tuple[str, tuple]:
    return sql_with_params(
        scope.annotate(kw_rank=RawSQL(KEYWORD_RANK_SQL, (query,)))
        .filter(RawSQL(KEYWORD_MATCH_SQL, (query,), output_field=BooleanField()))
        .values("id", "search_vector", "kw_rank")
    )


def _semantic_branch(
    scope: QuerySet, vector: list[float], depth: int, model: str | None, exact: bool
) -> tuple[str, tuple]:
    if model:
        # Vectors of another model are not comparable; `reembed` brings them over.
        scope = scope.filter(embedding_model=model)
    distance = CosineDistance("embedding", vector)
    if exact:
        # `+ 0` hides the operator from the planner: an exact scan of the scope, no HNSW.
        distance = ExpressionWrapper(distance + Value(0.0), output_field=FloatField())
    return sql_with_params(
        scope.filter(embedding__isnull=False)
        .annotate(sem_dist=distance)
        .order_by("sem_dist")
        .values_list("id", "sem_dist")[:depth]
    )


def ranked_ids(
    scope: QuerySet,
    *,
    query: str,
    vector: list[float] | None,
    mode: str,
    limit: int,
    min_score: float | None = None,
    model: str | None = None,
) -> list[tuple[str, float]]:
    """`[(memory_id, relevance 0–1)]`, best first, computed by one SQL statement (and a second,
    exact one when the HNSW walk came back short).

    keyword relevance = score / (score + 3), score = Σ IDF + 5 · ts_rank; semantic relevance =
    cosine similarity clamped to 0–1; hybrid relevance = (1.5 · cosine similarity + 1 · keyword
    score relative to the best among the candidates) / 2.5, both recomputed for every candidate
    of either list (a memory found by one list still gets the other's score).
    """
    depth = max(DEPTH, limit)
    args = (scope, query, vector, mode, limit, min_score, model)
    with transaction.atomic(), connection.cursor() as cursor:
        if vector is not None:
            # Filtered HNSW scans keep walking the graph until `depth` rows pass the filters.
            cursor.execute(
                "SET LOCAL hnsw.iterative_scan = relaxed_order; "
                f"SET LOCAL hnsw.ef_search = {int(max(EF_SEARCH, depth))}"
            )
        cursor.execute(*_ranking_sql(*args, exact=False))
        rows = cursor.fetchall()
        if vector is not None:
            found = next(int(row[1]) for row in rows if row[0] is None)
            rows = [row for row in rows if row[0] is not None]
            if found < depth:
                # Fewer vectors than asked for: either the scope is that small, or the index
                # walk stopped before finding the scope's rows among many others (a small
                # tenant in a big table, dead tuples). An exact scan of the scope is cheap in
                # both cases and always complete.
                cursor.execute(*_ranking_sql(*args, exact=True))
                rows = cursor.fetchall()
    rows.sort(key=lambda row: (-row[1], row[0]))
    return [(row[0], float(row[1])) for row in rows]


def _ranking_sql(
    scope: QuerySet,
    query: str,
    vector: list[float] | None,
    mode: str,
    limit: int,
    min_score: float | None,
    model: str | None,
    *,
    exact: bool,
) -> tuple[str, list]:
    depth = max(DEPTH, limit)
    parts: list[str] = []
    params: list[Any] = []
    if mode in ("keyword", "hybrid"):
        # Score = Σ BM25-style IDF of the query lexemes a memory holds, with the document
        # frequencies counted over the memories matching any lexeme (for an OR query, exactly
        # the scope's memories holding each lexeme), + 5 · ts_rank. MATERIALIZED, so the
        # planner does not count again per row.
        sql, p = _keyword_matches(scope, query)
        parts.append(
            f"kw_all AS MATERIALIZED ({sql}), "
            "kw_lex AS (SELECT DISTINCT lexeme, quote_literal(lexeme)::tsquery AS q "
            "FROM unnest(to_tsvector('english'::regconfig, %s))), "
            "kw_hits AS MATERIALIZED (SELECT a.id, l.lexeme FROM kw_all a JOIN kw_lex l "
            "ON a.search_vector @@ l.q), "
            "kw_n AS MATERIALIZED (SELECT count(*)::float8 AS n FROM kw_all), "
            "kw_df AS MATERIALIZED (SELECT lexeme, count(*)::float8 AS df "
            "FROM kw_hits GROUP BY lexeme), "
            "kw_idf AS (SELECT h.id, sum(ln(1 + (kw_n.n - d.df + 0.5) / (d.df + 0.5))) AS s "
            "FROM kw_hits h JOIN kw_df d USING (lexeme) CROSS JOIN kw_n GROUP BY h.id), "
            "kw_full AS (SELECT a.id, COALESCE(i.s, 0) + 5.0 * a.kw_rank "
            "AS kw_score FROM kw_all a LEFT JOIN kw_idf i USING (id)), "
            "kw AS (SELECT id, kw_score "
            f"FROM kw_full ORDER BY kw_score DESC, id LIMIT {int(depth)})"
        )
        params.extend([*p, query])
    if mode in ("semantic", "hybrid"):
        assert vector is not None
        sql, p = _semantic_branch(scope, vector, depth, model, exact)
        # MATERIALIZED: the scan runs once, on its own (its LIMIT is the index walk's), for
        # the ranking and for the count of what it returned.
        parts.append(f"sem AS MATERIALIZED ({sql})")
        params.extend(p)

    if mode == "keyword":
        select = "SELECT id, kw_score / (kw_score + 3.0) AS relevance FROM kw"
    elif mode == "semantic":
        select = "SELECT id, LEAST(1, GREATEST(0, 1 - sem_dist)) AS relevance FROM sem"
    else:
        # Both scores again for every candidate of either list, then mixed: the cosine
        # similarity (clamped at 0) weighs 1.5, the keyword score relative to the best among the
        # candidates 1.
        table = Memory._meta.db_table
        sim_sql = "1 - (m.embedding <=> %s::vector)"
        if model:
            sim_sql = f"CASE WHEN m.embedding_model = %s THEN {sim_sql} END"
        parts.append(
            "cand AS (SELECT id FROM kw UNION SELECT id FROM sem), "
            "scored AS (SELECT m.id, "
            f"COALESCE({sim_sql}, 0) AS sim, "
            "COALESCE(f.kw_score, 0) AS kws "
            f"FROM {table} m LEFT JOIN kw_full f ON f.id = m.id "
            "WHERE m.id IN (SELECT id FROM cand)), "
            "normed AS (SELECT id, sim, kws, max(kws) OVER () AS maxk FROM scored)"
        )
        params.extend([model] if model else [])
        params.append(vector_literal(vector))
        select = (
            "SELECT id, (1.5 * COALESCE(GREATEST(sim, 0), 0) "
            "+ 1.0 * COALESCE(kws / NULLIF(maxk, 0), 0)) / 2.5 AS relevance FROM normed"
        )
    ranked = f"SELECT id, relevance FROM ({select}) fused"
    if min_score is not None:
        ranked += " WHERE relevance >= %s"
        params.append(min_score)
    ranked += " ORDER BY relevance DESC, id LIMIT %s"
    params.append(limit)
    if vector is None or exact:
        return f"WITH {', '.join(parts)} {ranked}", params
    # A first row (id NULL) counts what the HNSW scan returned, so the caller can tell an
    # index scan that gave up early (hnsw.max_scan_tuples) from a scope that is that small.
    sql = (
        f"WITH {', '.join(parts)} "
        "(SELECT NULL::varchar AS id, count(*)::float8 AS relevance FROM sem) "
        f"UNION ALL ({ranked})"
    )
    return sql, params

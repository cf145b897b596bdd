"""The ranking: memory ids by relevance to a query, computed inside PostgreSQL in one statement.

- keyword: full-text over the generated `search_vector`, with a tsquery that ORs the query's
  lexemes (stop words dropped, stemmed by the `english` config) — plainto_tsquery ANDs them,
  which finds nothing as soon as a question uses one word the memory lacks — scored by the
  BM25-style IDF of the lexemes each memory holds (counted over the matching memories) plus
  ts_rank;
- semantic: pgvector cosine distance through the HNSW index, with iterative index scans so a
  selective tenant/agent/subject filter still yields `depth` rows;
- hybrid: the top candidates of both lists, each re-scored by both signals and mixed linearly
  (see `FUSION` for the knobs chosen on LoCoMo; README "Search quality" keeps the experiment
  log, including the reciprocal-rank fusion this replaced).

`ranked_ids` ranks whatever scope it is given: agents' search and hydrate pass the visible
memories (`memories.retrieval.search.search_scope`), the console its tenant-wide queryset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, FloatField, QuerySet, Value
from django.db.models.expressions import RawSQL
from pgvector.django import CosineDistance

from memories.models import Memory


@dataclass(frozen=True)
class Fusion:
    """Knobs of the hybrid ranking (chosen on LoCoMo; see README "Search quality")."""

    rrf_k: int = 60
    keyword_weight: float = 1.0
    semantic_weight: float = 1.5
    # Candidates taken from each list before fusing (at least the requested limit).
    depth: int = 40
    # Candidates visited by the HNSW scan; iterative scans go further when filters drop rows.
    ef_search: int = 100
    # "rrf": weighted reciprocal rank; "linear": both scores re-computed for the union of the
    # candidates, normalised, and mixed with the same weights.
    method: str = "linear"
    semantic_norm: str = "raw"
    # "max": keyword rank divided by the best rank among the candidates; "squash": r / (r + c).
    keyword_norm: str = "max"
    keyword_squash: float = 3.0
    # Keyword score = sum of BM25-style IDF of the query lexemes a memory contains, with the
    # document frequencies counted over the memories matching any lexeme (exactly the scope's,
    # since the OR query matches every memory holding any of them), plus ts_rank to break ties.
    keyword_idf: bool = True
    idf_rank_weight: float = 5.0


FUSION = Fusion()

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


def _keyword_branch(scope: QuerySet, query: str, depth: int) -> tuple[str, tuple]:
    return sql_with_params(
        scope.annotate(kw_score=RawSQL(KEYWORD_RANK_SQL, (query,)))
        .filter(RawSQL(KEYWORD_MATCH_SQL, (query,), output_field=BooleanField()))
        .order_by("-kw_score", "id")
        .values_list("id", "kw_score")[:depth]
    )


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


def _vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def ranked_ids(
    scope: QuerySet,
    *,
    query: str,
    vector: list[float] | None,
    mode: str,
    limit: int,
    min_score: float | None = None,
    fusion: Fusion = FUSION,
    model: str | None = None,
) -> list[tuple[str, float]]:
    """`[(memory_id, relevance 0–1)]`, best first, computed by one SQL statement (and a second,
    exact one when the HNSW walk came back short).

    keyword relevance = score / (score + 3), score = Σ IDF + 5 · ts_rank; semantic relevance =
    cosine similarity clamped to 0–1; hybrid (linear) relevance = the weighted mean of the cosine
    similarity and the keyword score relative to the best among the candidates, both recomputed
    for every candidate of either list (a memory found by one list still gets the other's score).
    """
    depth = max(fusion.depth, limit)
    args = (scope, query, vector, mode, limit, min_score, fusion, model)
    with transaction.atomic(), connection.cursor() as cursor:
        if vector is not None:
            # Filtered HNSW scans keep walking the graph until `depth` rows pass the filters.
            cursor.execute(
                "SET LOCAL hnsw.iterative_scan = relaxed_order; "
                f"SET LOCAL hnsw.ef_search = {int(max(fusion.ef_search, depth))}"
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
    fusion: Fusion,
    model: str | None,
    *,
    exact: bool,
) -> tuple[str, list]:
    depth = max(fusion.depth, limit)
    parts: list[str] = []
    params: list[Any] = []
    if mode in ("keyword", "hybrid") and fusion.keyword_idf:
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
            f"kw_full AS (SELECT a.id, COALESCE(i.s, 0) + {fusion.idf_rank_weight} * a.kw_rank "
            "AS kw_score FROM kw_all a LEFT JOIN kw_idf i USING (id)), "
            "kw AS (SELECT id, kw_score, row_number() OVER (ORDER BY kw_score DESC, id) AS r "
            f"FROM kw_full ORDER BY kw_score DESC, id LIMIT {int(depth)})"
        )
        params.extend([*p, query])
    elif mode in ("keyword", "hybrid"):
        sql, p = _keyword_branch(scope, query, depth)
        parts.append(
            f"kw AS (SELECT id, kw_score, row_number() OVER (ORDER BY kw_score DESC, id) AS r "
            f"FROM ({sql}) kw_raw)"
        )
        params.extend(p)
    if mode in ("semantic", "hybrid"):
        assert vector is not None
        sql, p = _semantic_branch(scope, vector, depth, model, exact)
        # MATERIALIZED: relaxed_order scans may return rows slightly out of order; rank again.
        parts.append(
            f"sem_raw AS MATERIALIZED ({sql}), "
            f"sem AS (SELECT id, sem_dist, row_number() OVER (ORDER BY sem_dist, id) AS r "
            f"FROM sem_raw)"
        )
        params.extend(p)

    if mode == "keyword":
        c = fusion.keyword_squash
        select = f"SELECT id, kw_score / (kw_score + {c}) AS relevance FROM kw"
    elif mode == "semantic":
        select = "SELECT id, LEAST(1, GREATEST(0, 1 - sem_dist)) AS relevance FROM sem"
    elif fusion.method == "rrf":
        k, wk, ws = fusion.rrf_k, fusion.keyword_weight, fusion.semantic_weight
        best = wk / (k + 1) + ws / (k + 1)
        select = (
            "SELECT COALESCE(kw.id, sem.id) AS id, "
            f"(COALESCE({wk} / ({k} + kw.r), 0) + COALESCE({ws} / ({k} + sem.r), 0)) / {best} "
            "AS relevance FROM kw FULL OUTER JOIN sem ON kw.id = sem.id"
        )
    else:
        wk, ws = fusion.keyword_weight, fusion.semantic_weight
        table = Memory._meta.db_table
        sim_sql = "1 - (m.embedding <=> %s::vector)"
        if model:
            sim_sql = f"CASE WHEN m.embedding_model = %s THEN {sim_sql} END"
        if fusion.keyword_idf:
            kws_sql = "COALESCE(f.kw_score, 0)"
            kws_join = " LEFT JOIN kw_full f ON f.id = m.id"
        else:
            kws_join = ""
            kws_sql = KEYWORD_RANK_SQL.replace("search_vector", "m.search_vector")
        parts.append(
            "cand AS (SELECT id FROM kw UNION SELECT id FROM sem), "
            "scored AS (SELECT m.id, "
            f"COALESCE({sim_sql}, 0) AS sim, "
            f"{kws_sql} AS kws "
            f"FROM {table} m{kws_join} WHERE m.id IN (SELECT id FROM cand)), "
            "normed AS (SELECT id, sim, kws, max(kws) OVER () AS maxk, "
            "max(sim) OVER () AS maxs, min(sim) OVER () AS mins FROM scored)"
        )
        params.extend([model] if model else [])
        params.append(_vector_literal(vector))
        if not fusion.keyword_idf:
            params.append(query)
        if fusion.semantic_norm == "minmax":
            sem_expr = "(sim - mins) / NULLIF(maxs - mins, 0)"
        else:
            sem_expr = "GREATEST(sim, 0)"
        if fusion.keyword_norm == "max":
            kw_expr = "kws / NULLIF(maxk, 0)"
        else:
            kw_expr = f"kws / (kws + {fusion.keyword_squash})"
        select = (
            f"SELECT id, ({ws} * COALESCE({sem_expr}, 0) "
            f"+ {wk} * COALESCE({kw_expr}, 0)) / {wk + ws} AS relevance FROM normed"
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
        "(SELECT NULL::varchar AS id, count(*)::float8 AS relevance FROM sem_raw) "
        f"UNION ALL ({ranked})"
    )
    return sql, params

"""The ranking: memory ids by relevance to a query, computed inside PostgreSQL in one statement.

- keyword: full-text over the generated `search_vector`, with a tsquery that ORs the query's
  lexemes (stop words dropped, stemmed by the `english` config) — plainto_tsquery ANDs them,
  which finds nothing as soon as a question uses one word the memory lacks — scored by the
  BM25-style IDF of the lexemes each memory holds (counted over the memories ranked) plus
  ts_rank. Its work is bounded by the candidates it takes, not by how many memories hold the
  query's words: each lexeme's matches are read `common_matches(depth)` at most; a lexeme with
  that many is common (its IDF near zero), and of the memories holding only common lexemes a
  share of that size is ranked. A query without a common lexeme ranks every match;
- semantic: pgvector cosine distance through the HNSW index, with iterative index scans so a
  selective tenant/agent/subject filter still yields `depth` rows;
- hybrid: the top candidates of both lists, each re-scored by both signals and mixed linearly.

The scores, weights and depths were chosen on LoCoMo; docs/benchmarks.md ("Search quality",
"What we tried") sums up the experiments, including the variants tried and not kept (reciprocal-rank
fusion, min-max and squashed normalisations, ts_rank without IDF); git history keeps the log.

`ranked_ids` ranks whatever scope it is given: agents' search and hydrate pass the visible
memories (`memories.retrieval.search.search_scope`), the console its tenant-wide queryset.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, FloatField, Q, QuerySet, Value
from django.db.models.expressions import Expression, RawSQL
from pgvector.django import CosineDistance

from memories.models import Memory, MemoryVector, vector_literal
from memories.retrieval import context_ranking
from memories.retrieval.plans import generic_plan_rows
from memoryhub import hnsw, tracing

# Candidates taken from each list before fusing (at least the requested limit).
DEPTH = 40
# A lexeme the scope holds in this many memories per candidate taken (`common_matches`) is
# common: its IDF is near zero, so the keyword branch reads no more of its matches than that.
COMMON_MATCHES_PER_CANDIDATE = 5


def common_matches(depth: int) -> int:
    """Matches of one lexeme past which it is common: the keyword branch's work is bounded by
    the candidates it takes (`depth`), not by how many memories hold a query's words."""
    return int(COMMON_MATCHES_PER_CANDIDATE * depth)


# The OR tsquery, built inside PostgreSQL from the query text: every lexeme of
# to_tsvector('english', q) (so stop words are gone and words are stemmed), quoted, joined by |.
# NULL when the query has no lexeme (only stop words): the keyword branch is then empty.
TSQUERY_SQL = (
    "(SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery "
    "FROM unnest(to_tsvector('english'::regconfig, %s)))"
)
# Plain ts_rank (normalisation 0) ranked best on LoCoMo; length normalisations (1, 2, 32) and
# ts_rank_cd all ranked worse there (docs/benchmarks.md). Weights {D, C, B, A}: a memory's
# own key and text (A) count 0.1, as every word did before documents held neighbours' words (D).


# A lexeme's IDF from its row `d` of kw_df (its document frequency, and the memories ranked).
IDF_SQL = "ln(1 + (d.n - d.df + 0.5) / (d.df + 0.5))"
TS_RANK_WEIGHT = 5.0


def _held_weight(vector: str, has_context: str) -> str:
    """The share of its IDF a lexeme `l` held by a memory adds: all of it when the memory's own
    key or text holds it (weight A), `context.NEIGHBOUR_IDF` when only its neighbours do. Only a
    memory with neighbours' words can hold a lexeme at D alone."""
    return (
        f"CASE WHEN NOT {has_context} OR {vector} @@ l.qa THEN 1.0 "
        f"ELSE {float(context_ranking.NEIGHBOUR_IDF)!r} END"
    )


def keyword_rank_sql(vector: str = "search_vector") -> str:
    weights = f"'{{{float(context_ranking.NEIGHBOUR_TS_WEIGHT)!r}, 0.2, 0.4, 0.1}}'::float4[]"
    return f"ts_rank({weights}, {vector}, {TSQUERY_SQL})"


def sql_with_params(qs: QuerySet[Any, Any]) -> tuple[str, tuple[Any, ...]]:
    """A queryset's SQL and parameters, to embed as a subquery of a hand-written statement."""
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def _keyword_sets(scope: QuerySet[Memory], cap: int) -> tuple[str, tuple[Any, ...]]:
    """`cap` at most of the scope's memories holding the lexeme `l.q` of the enclosing
    statement (a LATERAL subquery: one bitmap scan of the full-text index per lexeme).

    Counted by `row_number()`, not cut by a LIMIT: the planner plans for every match (a bitmap
    scan of the index), while the window stops reading at the `cap`-th row (its run condition).
    A LIMIT would let it walk another index or the table, in the hope of finding `cap` matches
    soon, which for a rare word means reading all of a big owner's memories."""
    sql, params = sql_with_params(
        scope.annotate(
            has_context=RawSQL("context_text IS NOT NULL", (), output_field=BooleanField())
        )
        .filter(RawSQL("search_vector @@ l.q", (), output_field=BooleanField()))
        .values("id", "search_vector", "has_context")
    )
    return (
        "SELECT id, search_vector, has_context FROM (SELECT *, row_number() OVER () AS n "
        f"FROM ({sql}) m) numbered WHERE n <= {int(cap)}",
        params,
    )


def _semantic_branch(
    scope: QuerySet[Memory],
    vector: str,
    depth: int,
    model: str | None,
    exact: bool,
    owners: Q | None,
) -> tuple[str, tuple[Any, ...]]:
    # The vectors' own table (`MemoryVector`), joined to the scope's memories.
    scope = scope.filter(owners if owners is not None else Q(vector__isnull=False))
    if model:
        # Vectors of another model are not comparable; `reembed` brings them over.
        scope = scope.filter(vector__model=model)
    distance: Expression = CosineDistance("vector__embedding", Value(vector))
    if exact:
        # `+ 0` hides the operator from the planner: an exact scan of the scope, no HNSW.
        distance = ExpressionWrapper(distance + Value(0.0), output_field=FloatField())
    return sql_with_params(
        scope.annotate(sem_dist=distance).order_by("sem_dist").values_list("id", "sem_dist")[:depth]
    )


@dataclass(frozen=True)
class RankingArgs:
    """What a ranking statement takes besides its scope, as SQL parameters: the vector as
    pgvector's text input and the query's dates as `int[]` literals (`context.QueryDates`), so
    that a compiled statement (`memories.retrieval.search`) can take any of them as a slot."""

    query: str
    vector: str | None
    mode: str
    limit: int
    depth: int
    min_score: float | None = None
    model: str | None = None
    dates: tuple[str, str, str] | None = None
    # The owners a scope's memories can have: an exact scan reads their vectors by owner index.
    vector_owners: Q | None = None

    @classmethod
    def of(
        cls,
        *,
        query: str,
        vector: list[float] | None,
        mode: str,
        limit: int,
        min_score: float | None = None,
        model: str | None = None,
    ) -> RankingArgs:
        dates = context_ranking.query_dates(query) if mode == "hybrid" else None
        return cls(
            query=query,
            vector=None if vector is None else vector_literal(vector),
            mode=mode,
            limit=limit,
            depth=max(DEPTH, limit),
            min_score=min_score,
            model=model,
            dates=dates.arrays() if dates else None,
        )


def ranked_ids(
    scope: QuerySet[Memory],
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
    args = RankingArgs.of(
        query=query, vector=vector, mode=mode, limit=limit, min_score=min_score, model=model
    )
    return run_ranking(
        lambda exact: ranking_sql(scope, args, exact=exact),
        has_vector=vector is not None,
        depth=args.depth,
    )


def run_ranking(
    statement: Callable[[bool], tuple[str, list[Any]]],
    *,
    has_vector: bool,
    depth: int,
    exact: bool = False,
) -> list[tuple[str, float]]:
    """Runs `statement(exact)` (`ranking_sql`'s, or the same compiled once) as `ranked_ids`
    describes: the HNSW walk first, then the exact scan when the walk came back short; with
    `exact` (a scope the caller knows to be small), the exact scan alone."""
    rows = run_ranking_rows(statement, has_vector=has_vector, depth=depth, exact=exact)
    return [(row[0], float(row[1])) for row in rows]


def run_ranking_rows(
    statement: Callable[[bool], tuple[str, list[Any]]],
    *,
    has_vector: bool,
    depth: int,
    exact: bool = False,
) -> list[tuple[Any, ...]]:
    """`run_ranking`'s rows, best first, whole: id, relevance, score, then whatever columns
    `statement` selects after `ranking_sql`'s (search's hit rows: `search._with_hit_rows`)."""
    if exact:
        with tracing.span("rank", depth=depth, exact=True):
            return _best_first(generic_plan_rows(*statement(True)))
    # Filtered HNSW scans keep walking the graph until `depth` rows pass the filters: the
    # connection holds those settings from its start (`memoryhub.hnsw`); a transaction sets them
    # only where it needs others (a deeper candidate list) or where the connection lacks them.
    walk = hnsw.scan_settings(depth) if has_vector else nullcontext()
    with tracing.span("rank", depth=depth), walk, connection.cursor() as cursor:
        cursor.execute(*statement(False))
        rows = cursor.fetchall()
        if has_vector:
            found = next(int(row[1]) for row in rows if row[0] is None)
            rows = [row for row in rows if row[0] is not None]
            if found < depth:
                # Fewer vectors than asked for: either the scope is that small, or the index
                # walk stopped before finding the scope's rows among many others (a small
                # tenant in a big table, dead tuples). An exact scan of the scope is cheap in
                # both cases and always complete.
                cursor.execute(*statement(True))
                rows = cursor.fetchall()
    return _best_first(rows)


def _best_first(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Ranked rows (id, relevance, score, …) best first, ties by id: the ranking's own order,
    which a statement wrapping it (search's hit rows, a join) need not keep."""
    rows.sort(key=lambda row: (-row[2], row[0]))
    return rows


# The threads (per process) that run a hybrid ranking's semantic branch beside its keyword one
# (`run_branches`), each on a connection of its own from the pool, and their slots, taken
# without waiting, so a search that finds them all busy runs its one statement instead.
_branches: tuple[ThreadPoolExecutor, threading.BoundedSemaphore] | None = None
_branches_lock = threading.Lock()


def branches_allowed() -> bool:
    """Whether a search may run its branches on two connections: with branch threads, outside a
    transaction (another connection would not see its uncommitted writes), and with the
    connection pool (without it, each branch would open and close a connection)."""
    return (
        settings.MEMORYHUB_SEARCH_BRANCH_THREADS > 0
        and not connection.in_atomic_block
        and "pool" in connection.settings_dict["OPTIONS"]
    )


def _branch_pool() -> tuple[ThreadPoolExecutor, threading.BoundedSemaphore]:
    global _branches
    with _branches_lock:
        if _branches is None:
            threads = settings.MEMORYHUB_SEARCH_BRANCH_THREADS
            _branches = (
                ThreadPoolExecutor(max_workers=threads, thread_name_prefix="branch"),
                threading.BoundedSemaphore(threads),
            )
        return _branches


def run_branches(
    keyword: Callable[[], tuple[str, list[Any]]],
    semantic: Callable[[bool], tuple[str, list[Any]]],
    fuse: Callable[[list[tuple[Any, ...]], list[tuple[Any, ...]]], tuple[str, list[Any]]],
    *,
    depth: int,
) -> list[tuple[Any, ...]] | None:
    """A hybrid ranking in three statements: its semantic branch (`semantic(exact)`, the HNSW
    walk, and the exact scan where the walk came back short) on a branch thread while this one
    runs the keyword branch (`keyword()`), then `fuse(keyword rows, semantic rows)`: the rows of
    `run_ranking_rows`, best first. Over a large scope each branch costs milliseconds, and on
    two connections PostgreSQL runs them at once. None where no branch thread is free."""
    executor, slots = _branch_pool()
    if not slots.acquire(blocking=False):
        return None
    try:
        # In the request's context, so that the branch's span is the search's child (database
        # connections are per thread, not per context).
        future = executor.submit(contextvars.copy_context().run, _semantic_rows, semantic, depth)
    except BaseException:
        slots.release()
        raise
    future.add_done_callback(lambda _: slots.release())
    try:
        with tracing.span("rank.keyword", depth=depth), connection.cursor() as cursor:
            cursor.execute(*keyword())
            keyword_rows = cursor.fetchall()
    except BaseException:
        wait([future])
        raise
    semantic_rows = future.result()
    with tracing.span("rank.fuse", depth=depth), connection.cursor() as cursor:
        cursor.execute(*fuse(keyword_rows, semantic_rows))
        rows = cursor.fetchall()
    return _best_first(rows)


def _semantic_rows(
    statement: Callable[[bool], tuple[str, list[Any]]], depth: int
) -> list[tuple[Any, ...]]:
    """On a branch thread: the semantic branch's rows (`run_ranking_rows`'s walk, then the exact
    scan where the walk came back short); the thread's connection goes back to the pool."""
    try:
        with (
            tracing.span("rank.semantic", depth=depth),
            hnsw.scan_settings(depth),
            connection.cursor() as cursor,
        ):
            cursor.execute(*statement(False))
            rows: list[tuple[Any, ...]] = cursor.fetchall()
            if len(rows) < depth:
                cursor.execute(*statement(True))
                rows = cursor.fetchall()
        return rows
    finally:
        connection.close()


# The query's lexemes (stop words dropped, stemmed), each with its tsquery and its tsquery at
# weight A: `kw_lex`, in lexeme order.
KW_LEX_SQL = (
    "kw_lex AS MATERIALIZED (SELECT DISTINCT lexeme, quote_literal(lexeme)::tsquery AS q, "
    "(quote_literal(lexeme) || ':A')::tsquery AS qa "
    "FROM unnest(to_tsvector('english'::regconfig, %s)) ORDER BY lexeme)"
)


def ranking_sql(
    scope: QuerySet[Memory], args: RankingArgs, *, exact: bool, part: str | None = None
) -> tuple[str, list[Any]]:
    """The ranking statement over `scope` (its SQL and parameters); with `part`, one branch of
    a hybrid ranking alone (`BRANCH_SQL`), for `fusion_sql` to mix."""
    query, vector, mode, depth, model = args.query, args.vector, args.mode, args.depth, args.model
    if part is not None:
        assert mode == "hybrid" and part in BRANCH_SQL
        mode = part
    parts: list[str] = []
    params: list[Any] = []
    if mode in ("keyword", "hybrid"):
        # Score = Σ BM25-style IDF of the query lexemes a memory holds, with the document
        # frequencies counted over the memories ranked (for an OR query, the scope's memories
        # holding each lexeme), + 5 · ts_rank. A lexeme only its neighbours hold (weight D,
        # not A) adds `context.NEIGHBOUR_IDF` of its IDF. The memories ranked are every match
        # while no lexeme is common (`common_matches`), else a bounded share of them.
        # MATERIALIZED, so the planner does not count again per row.
        cap = common_matches(depth)
        sql, p = _keyword_sets(scope, cap)
        parts.append(
            f"{KW_LEX_SQL}, "
            # Each lexeme's matches in the scope, `cap` at most: a lexeme with that many is
            # common (its IDF near zero), and its matches are not all read.
            "kw_sets AS MATERIALIZED (SELECT l.lexeme, s.id, s.search_vector, s.has_context "
            f"FROM kw_lex l CROSS JOIN LATERAL ({sql}) s), "
            "kw_common AS MATERIALIZED (SELECT lexeme FROM kw_sets GROUP BY lexeme "
            f"HAVING count(*) >= {int(cap)}), "
            # Ranked: every match of a lexeme that is not common, and `cap` at most of those
            # holding only common ones (with no common lexeme: every match, each once).
            "kw_rare AS MATERIALIZED (SELECT id, any_value(search_vector) AS search_vector, "
            "bool_or(has_context) AS has_context FROM kw_sets "
            "WHERE lexeme NOT IN (SELECT lexeme FROM kw_common) GROUP BY id), "
            "kw_all AS MATERIALIZED (SELECT id, search_vector, has_context, "
            f"{keyword_rank_sql()} AS kw_rank FROM ("
            "SELECT * FROM kw_rare UNION ALL (SELECT id, any_value(search_vector), "
            "bool_or(has_context) FROM kw_sets WHERE lexeme IN (SELECT lexeme FROM kw_common) "
            f"AND id NOT IN (SELECT id FROM kw_rare) GROUP BY id LIMIT {int(cap)})) r), "
            # Each (memory, lexeme it holds), tested once; in kw_lex's order, so every memory
            # adds its lexemes' IDFs below in one order, whatever the plan.
            "kw_hits AS MATERIALIZED (SELECT a.id, a.kw_rank, l.lexeme, "
            f"{_held_weight('a.search_vector', 'a.has_context')} AS w "
            "FROM kw_all a JOIN kw_lex l ON a.search_vector @@ l.q), "
            # Each lexeme's document frequency: one hashed grouping of the hits, then joined
            # back by lexeme (a handful of rows). No window, no sort of the hits by id: at 1M
            # memories a question matches ~8k of them, whose ids sorted in the database's
            # collation cost a good share of the statement (docs/performance.md#code-figures).
            "kw_df AS (SELECT lexeme, count(*)::float8 AS df, "
            "(SELECT count(*) FROM kw_all)::float8 AS n FROM kw_hits GROUP BY lexeme), "
            # Every matching memory holds at least one of the lexemes its match ORs together,
            # so grouping the hits gives each its score.
            "kw_full AS MATERIALIZED (SELECT h.id, "
            f"sum(h.w * {IDF_SQL}) + {TS_RANK_WEIGHT!r} * max(h.kw_rank) "
            "AS kw_score FROM kw_hits h JOIN kw_df d ON d.lexeme = h.lexeme GROUP BY h.id), "
            "kw AS (SELECT id, kw_score "
            f"FROM kw_full ORDER BY kw_score DESC, id LIMIT {int(depth)})"
        )
        params.extend([query, *p, query])
    if mode in ("semantic", "hybrid"):
        assert vector is not None
        sql, p = _semantic_branch(scope, vector, depth, model, exact, args.vector_owners)
        # MATERIALIZED: the scan runs once, on its own (its LIMIT is the index walk's), for
        # the ranking and for the count of what it returned.
        parts.append(f"sem AS MATERIALIZED ({sql})")
        params.extend(p)

    if part is not None:
        return f"WITH {', '.join(parts)} {BRANCH_SQL[part]}", params
    if mode == "keyword":
        select = "SELECT id, kw_score / (kw_score + 3.0) AS score FROM kw"
    elif mode == "semantic":
        select = "SELECT id, LEAST(1, GREATEST(0, 1 - sem_dist)) AS score FROM sem"
    else:
        select = _hybrid(args, parts, params)
    ranked = _ranked(select, args, params)
    if vector is None or exact:
        return f"WITH {', '.join(parts)} {ranked}", params
    # A first row (id NULL) counts what the HNSW scan returned, so the caller can tell an
    # index scan that gave up early (hnsw.max_scan_tuples) from a scope that is that small.
    sql = (
        f"WITH {', '.join(parts)} "
        "(SELECT NULL::varchar AS id, count(*)::float8 AS relevance, 0::float8 AS score "
        f"FROM sem) UNION ALL ({ranked})"
    )
    return sql, params


def _ranked(select: str, args: RankingArgs, params: list[Any]) -> str:
    """The ranked rows (id, relevance, score) of `select`'s (id, score), best first."""
    ranked = f"SELECT id, LEAST(score, 1.0) AS relevance, score FROM ({select}) fused"
    if args.min_score is not None:
        ranked += " WHERE LEAST(score, 1.0) >= %s"
        params.append(args.min_score)
    ranked += " ORDER BY score DESC, id LIMIT %s"
    params.append(args.limit)
    return ranked


# A hybrid ranking's branches as statements of their own (`ranking_sql(part=...)`), for a large
# scope where each costs milliseconds: run at once on two connections, then mixed by
# `fusion_sql`. The keyword branch returns its candidates (id, score) and, id NULL, each
# lexeme's document frequency (df, lexeme, memories ranked); the semantic one its candidates.
BRANCH_SQL = {
    "keyword": (
        "SELECT id, kw_score, NULL::text AS lexeme, NULL::float8 AS n FROM kw "
        "UNION ALL SELECT NULL, df, lexeme, n FROM kw_df"
    ),
    "semantic": "SELECT id, sem_dist FROM sem",
}


def fusion_sql(
    args: RankingArgs, keyword_rows: list[tuple[Any, ...]], semantic_rows: list[tuple[Any, ...]]
) -> tuple[str, list[Any]]:
    """The hybrid ranking of the candidates the branches found (`BRANCH_SQL`'s rows): the same
    statement as `ranking_sql`'s past its branches, reading them from arrays. A semantic
    candidate the keyword branch did not return is scored by the same formula `_hybrid` gives
    one its bounded read left out, from the same document frequencies."""
    candidates = [row for row in keyword_rows if row[0] is not None]
    frequencies = [row for row in keyword_rows if row[0] is None]
    parts = [
        KW_LEX_SQL,
        "kw_df AS (SELECT lexeme, df, %s::float8 AS n "
        "FROM unnest(%s::text[], %s::float8[]) AS d(lexeme, df))",
        "kw AS MATERIALIZED (SELECT id, kw_score "
        "FROM unnest(%s::varchar[], %s::float8[]) AS k(id, kw_score))",
        "kw_full AS (SELECT id, kw_score FROM kw)",
        "sem AS (SELECT id FROM unnest(%s::varchar[]) AS s(id))",
    ]
    params: list[Any] = [
        args.query,
        frequencies[0][3] if frequencies else 0.0,
        [row[2] for row in frequencies],
        [row[1] for row in frequencies],
        [row[0] for row in candidates],
        [row[1] for row in candidates],
        [row[0] for row in semantic_rows],
    ]
    ranked = _ranked(_hybrid(args, parts, params), args, params)
    return f"WITH {', '.join(parts)} {ranked}", params


def _hybrid(args: RankingArgs, parts: list[str], params: list[Any]) -> str:
    """The hybrid ranking's CTEs (appended to `parts`) and its final SELECT (id, score).

    Both scores again for every candidate of either list, then mixed: b = (1.5 · cosine
    similarity clamped at 0 + keyword score relative to the best candidate's) / 2.5. Then the
    context of `memories.retrieval.context_ranking`, on the candidates: neighbours' and the sequence's
    scores, dates, mentions.
    """
    table = Memory._meta.db_table
    sim_sql = "1 - (v.embedding <=> %s::vector)"
    if args.model:
        sim_sql = f"CASE WHEN v.model = %s THEN {sim_sql} END"
    # Candidates only: a neighbour outside both lists scores too little to matter, and
    # reading the neighbours' rows as well cost a fifth more time (docs/benchmarks.md).
    parts.append(
        # Each candidate (of either list) with its keyword score, if it matched: one grouping
        # over the matches and both lists, not a join the planner would nest.
        "cand AS (SELECT id, max(kw_score) AS kws FROM ("
        "SELECT id, kw_score, false AS pick FROM kw_full UNION ALL "
        "SELECT id, NULL, true FROM kw UNION ALL SELECT id, NULL, true FROM sem"
        ") c GROUP BY id HAVING bool_or(pick)), "
        "based AS (SELECT *, (1.5 * GREATEST(sim, 0) + COALESCE(kws / NULLIF("
        "max(kws) OVER (), 0), 0)) / 2.5 AS b FROM ("
        "SELECT m.id, m.prev_id, m.next_id, m.agent_id, m.subject_id, m.thread_id, "
        f"m.occurred_at, m.mentions, COALESCE({sim_sql}, 0) AS sim, "
        # A candidate the keyword branch did not rank (it holds no query word, or only common
        # ones, of which the branch read a bounded share) is scored here as it would have been.
        "COALESCE(c.kws, (SELECT "
        f"sum({_held_weight('m.search_vector', 'm.context_text IS NOT NULL')} * {IDF_SQL}) "
        f"+ {TS_RANK_WEIGHT!r} * {keyword_rank_sql('m.search_vector')} "
        "FROM kw_lex l JOIN kw_df d ON d.lexeme = l.lexeme WHERE m.search_vector @@ l.q), 0) "
        "AS kws "
        # OFFSET 0 keeps this subquery a step of its own: pulled up into `based`, its `kws`
        # (and with it that scoring subquery and the detoasting of each search_vector) was
        # computed three times a candidate, once for each use (docs/performance.md).
        f"FROM cand c JOIN {table} m ON m.id = c.id "
        f"LEFT JOIN {MemoryVector._meta.db_table} v ON v.memory_id = c.id OFFSET 0) scored), "
        "qv AS (SELECT to_tsvector('simple'::regconfig, %s) AS v)"
    )
    params.extend([args.model] if args.model else [])
    params.append(args.vector)
    params.append(args.query)  # the candidate's ts_rank
    params.append(args.query)
    seq = "PARTITION BY c.agent_id, c.subject_id, c.thread_id ORDER BY c.b DESC, c.id"
    others = (
        "GREATEST("
        f"max(c.b) OVER ({seq} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), "
        f"max(c.b) OVER ({seq} "
        "ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING))"
    )
    date_sql = "0"
    if args.dates:
        date_sql = (
            "COALESCE((SELECT max(CASE WHEN d.dd IS NULL THEN "
            f"{float(context_ranking.DATE_MONTH_WEIGHT)!r} ELSE {float(context_ranking.DATE_DAY_WEIGHT)!r} END) "
            "FROM unnest(%s::int[], %s::int[], %s::int[]) AS d(y, mo, dd), "
            "LATERAL (SELECT c.occurred_at AT TIME ZONE 'UTC' AS t) u "
            "WHERE (d.y IS NULL OR d.y = extract(year FROM u.t)) "
            "AND d.mo = extract(month FROM u.t) "
            "AND (d.dd IS NULL OR d.dd = extract(day FROM u.t))), 0)"
        )
        params.extend(args.dates)
    mention_sql = (
        f"CASE WHEN jsonb_typeof(c.mentions) = 'array' AND EXISTS (SELECT 1 FROM "
        "jsonb_array_elements(c.mentions) e, qv WHERE jsonb_typeof(e) = 'object' "
        "AND (e->>'name') ~ '[[:alnum:]]' AND qv.v @@ plainto_tsquery('simple'::regconfig, "
        f"e->>'name')) THEN {float(context_ranking.MENTION_BOOST)!r} ELSE 1.0 END"
    )
    return (
        f"SELECT id, (b + {float(context_ranking.NEIGHBOUR_WEIGHT)!r} * nb "
        f"+ {float(context_ranking.SEQUENCE_WEIGHT)!r} * sq + dt) * mb AS score FROM ("
        "SELECT c.id, c.b, GREATEST(COALESCE(p.b, 0), COALESCE(n.b, 0)) AS nb, "
        f"CASE WHEN c.thread_id IS NULL THEN 0 ELSE COALESCE({others}, 0) END AS sq, "
        f"CASE WHEN c.occurred_at IS NULL THEN 0 ELSE {date_sql} END AS dt, "
        f"{mention_sql} AS mb "
        "FROM based c LEFT JOIN based p ON p.id = c.prev_id "
        "LEFT JOIN based n ON n.id = c.next_id) ctx"
    )

"""Search and hydrate (SPEC §4): what an agent finds by query, and what it loads at start-up.

Search runs entirely inside PostgreSQL, as one statement:

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

Visibility comes from `memories.visibility` only; expired and tombstoned memories are never
candidates because every branch starts from `visible_memories`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import orjson
from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, ExpressionWrapper, FloatField, Q, QuerySet, Value
from django.db.models.expressions import RawSQL
from pgvector.django import CosineDistance

from accounts.models import Agent
from accounts.principal import Principal
from memories import validation
from memories.access import bump_access
from memories.clock import resolve_now
from memories.embeddings import get_embedder
from memories.models import Category, Memory, MemoryRevision
from memories.serialization import iso, memory_json_sql, search_hit_json
from memories.visibility import visible_memories, visible_memories_by_owner
from memoryhub.errors import InvalidInput

MODES = ("hybrid", "semantic", "keyword")
ARCHIVAL_MODES = ("tool_only", "auto", "off")
MAX_LIMIT = 100
MAX_QUERY_CHARS = 4000
SEARCH_FIELDS = frozenset(
    {
        "query",
        "mode",
        "limit",
        "min_score",
        "category",
        "categories",
        "kind",
        "tags",
        "subject_id",
        "thread_id",
        "session_id",
        "include_shared",
        "include_history",
    }
)
HYDRATE_FIELDS = frozenset(
    {
        "subject_id",
        "thread_id",
        "session_id",
        "budget_bytes",
        "query",
        "archival_mode",
        "archival_limit",
        "archival_min_score",
        "include_agent_core",
        "include_user_core",
        "format",
        "explain",
    }
)


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


# --- input ------------------------------------------------------------------------------------


def _query(data: dict, *, required: bool) -> str | None:
    value = data.get("query")
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            raise InvalidInput("'query' is required", field="query")
        return None
    if not isinstance(value, str):
        raise InvalidInput("'query' must be a string", field="query")
    if len(value) > MAX_QUERY_CHARS:
        raise InvalidInput(f"'query' is longer than {MAX_QUERY_CHARS} characters", field="query")
    return value.strip()


def _int(data: dict, name: str, default: int, *, low: int, high: int) -> int:
    value = data.get(name)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(f"'{name}' must be an integer {low}–{high}", field=name)
    return value


def _categories(data: dict) -> list[str]:
    out = []
    if data.get("category") is not None:
        out.append(validation.category(data["category"], default=""))
    listed = data.get("categories")
    if listed is not None:
        if not isinstance(listed, list) or len(listed) > 64:
            raise InvalidInput("'categories' must be a list of category names", field="categories")
        for item in listed:
            try:
                out.append(validation.category(item, default=""))
            except InvalidInput:
                raise InvalidInput(
                    "'categories' must be a list of category names", field="categories"
                ) from None
    return list(dict.fromkeys(out))


def _tag_filter(value: Any) -> list[str]:
    return validation.tags([value] if isinstance(value, str) else value)


@dataclass
class SearchParams:
    query: str
    mode: str = "hybrid"
    limit: int = 10
    min_score: float | None = None
    categories: list[str] = field(default_factory=list)
    kind: str | None = None
    tags: list[str] = field(default_factory=list)
    subject_id: str | None = None
    thread_id: str | None = None
    include_shared: bool = True
    include_history: bool = False


def parse_search(principal: Principal, data: Any) -> SearchParams:
    data = validation.require_object(data)
    validation.reject_unknown(data, SEARCH_FIELDS)
    min_score = data.get("min_score")
    kind = data.get("kind")
    return SearchParams(
        query=_query(data, required=True),
        mode=validation.choice(data.get("mode"), "mode", MODES, "hybrid"),
        limit=validation.parse_limit(data.get("limit"), default=10, maximum=MAX_LIMIT),
        min_score=None if min_score is None else validation.unit_float(min_score, "min_score"),
        categories=_categories(data),
        kind=None if kind is None else validation.kind(kind),
        tags=_tag_filter(data.get("tags")),
        subject_id=principal.resolve_subject(
            validation.identifier(data.get("subject_id"), "subject_id")
        ),
        thread_id=validation.thread(data),
        include_shared=validation.parse_bool(data.get("include_shared"), "include_shared", True),
        include_history=validation.parse_bool(
            data.get("include_history"), "include_history", False
        ),
    )


# --- the scope every branch starts from --------------------------------------------------------


def search_scope(principal: Principal, params: SearchParams, now: datetime) -> QuerySet:
    """Visible live memories narrowed by the request's filters.

    `conversation` memories belong to their run: they are candidates only for a request that
    names their `thread_id`.
    """
    qs = visible_memories(
        tenant=principal.tenant,
        agent=principal.agent,
        subject_id=params.subject_id,
        include_shared=params.include_shared,
        now=now,
    )
    if params.thread_id:
        qs = qs.filter(thread_id=params.thread_id)
    else:
        qs = qs.exclude(category=Category.CONVERSATION)
    if params.categories:
        qs = qs.filter(category__in=params.categories)
    if params.kind:
        qs = qs.filter(kind=params.kind)
    if params.tags:
        qs = qs.filter(tags__contains=params.tags)
    return qs


# --- ranking (one statement) -------------------------------------------------------------------


def _sql(qs: QuerySet) -> tuple[str, tuple]:
    sql, params = qs.query.sql_with_params()
    return sql, tuple(params)


def _keyword_branch(scope: QuerySet, query: str, depth: int) -> tuple[str, tuple]:
    return _sql(
        scope.annotate(kw_score=RawSQL(KEYWORD_RANK_SQL, (query,)))
        .filter(RawSQL(KEYWORD_MATCH_SQL, (query,), output_field=BooleanField()))
        .order_by("-kw_score", "id")
        .values_list("id", "kw_score")[:depth]
    )


def _keyword_matches(scope: QuerySet, query: str) -> tuple[str, tuple]:
    return _sql(
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
    return _sql(
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


# --- response format ---------------------------------------------------------------------------


def _owner_slugs(principal: Principal, memories) -> dict[int, str]:
    """Owner slugs of these memories (one query, and none when all are own or workspace)."""
    slugs = {principal.agent.pk: principal.agent.slug}
    others = {m.agent_id for m in memories if m.agent_id and m.agent_id not in slugs}
    if others:
        from accounts.models import Agent

        slugs.update(Agent.objects.filter(pk__in=others).values_list("pk", "slug"))
    return slugs


# What the response objects read: never the embedding or the tsvector (the bulk of a row).
RESPONSE_FIELDS = (
    "id",
    "tenant_id",
    "agent_id",
    "key",
    "category",
    "kind",
    "text",
    "data",
    "tags",
    "subject_id",
    "thread_id",
    "importance",
    "confidence",
    "capture_mode",
    "source_provider",
    "mentions",
    "expires_at",
    "last_confirmed_at",
    "created_at",
    "updated_at",
    "version",
    "status",
    "review_state",
    "size_bytes",
)


class _Row(SimpleNamespace):
    """A memory's response fields as plain attributes: what the serializers read, without
    building a model instance per row (a hydrate returns a hundred or more of them)."""

    @property
    def pk(self) -> str:
        return self.id


def _fetch(tenant_id: int, ids: list[str]) -> dict[str, _Row]:
    rows = Memory.objects.for_tenant(tenant_id).filter(pk__in=ids).values(*RESPONSE_FIELDS)
    return {row["id"]: _Row(**row) for row in rows}


def _history_hits(
    principal: Principal, scope: QuerySet, params: SearchParams, limit: int
) -> list[tuple[MemoryRevision, float]]:
    """Older texts of visible memories (from revisions) that match the query by full text."""
    revisions = (
        MemoryRevision.objects.filter(
            tenant_id=principal.tenant.pk,
            memory_id__in=scope.values("id"),
            before__text__isnull=False,
        )
        .exclude(change_type__in=["purge", "tombstone", "restore", "expire", "evict"])
        .annotate(
            h_score=RawSQL(
                "ts_rank(to_tsvector('english'::regconfig, before->>'text'), "
                + TSQUERY_SQL
                + ", 1)",
                (params.query,),
            )
        )
        .filter(
            RawSQL(
                "to_tsvector('english'::regconfig, before->>'text') @@ " + TSQUERY_SQL,
                (params.query,),
                output_field=BooleanField(),
            )
        )
        .order_by("-h_score", "-id")[:limit]
    )
    return [(r, float(r.h_score) / (float(r.h_score) + 1)) for r in revisions]


def _old_version(memory: Memory, revision: MemoryRevision) -> Memory:
    """The memory as it read before `revision` changed it (for include_history hits)."""
    old = copy.copy(memory)
    before = revision.before or {}
    for name in ("text", "data", "tags", "kind", "category", "mentions", "confidence"):
        if name in before:
            setattr(old, name, before[name])
    return old


def memory_search(*, principal: Principal, data: dict, now: datetime | None = None) -> dict:
    """POST /api/v1/search: the LLM-facing result list (SPEC §4 Search)."""
    principal.require_scope("read")
    now = resolve_now(now)
    params = parse_search(principal, data)
    scope = search_scope(principal, params, now)
    vector = model = None
    if params.mode in ("semantic", "hybrid"):
        embedder = get_embedder()
        vector, model = embedder.embed([params.query])[0], embedder.model_name
    ranked = ranked_ids(
        scope,
        query=params.query,
        vector=vector,
        mode=params.mode,
        limit=params.limit,
        min_score=params.min_score,
        model=model,
    )
    history = []
    if params.include_history:
        history = [
            (revision, score)
            for revision, score in _history_hits(principal, scope, params, params.limit)
            if params.min_score is None or score >= params.min_score
        ]
    ids = [mid for mid, _ in ranked] + [r.memory_id for r, _ in history]
    rows = _fetch(principal.tenant.pk, ids)
    slugs = _owner_slugs(principal, rows.values())
    agent = principal.agent
    hits = [
        (relevance, search_hit_json(rows[mid], agent=agent, relevance=relevance, slugs=slugs))
        for mid, relevance in ranked
        if mid in rows
    ]
    for revision, score in history:
        if revision.memory_id in rows:
            old = _old_version(rows[revision.memory_id], revision)
            hit = search_hit_json(old, agent=agent, relevance=score, is_latest=False, slugs=slugs)
            hits.append((score, hit))
    if history:
        hits.sort(key=lambda pair: -pair[0])
    bump_access(principal.tenant.pk, [mid for mid, _ in ranked if mid in rows], now)
    return {
        "success": True,
        "ok": True,
        "searchedAt": iso(now),
        "memories": [hit for _, hit in hits[: params.limit]],
    }


# --- hydrate -----------------------------------------------------------------------------------


@dataclass
class HydrateParams:
    subject_id: str | None
    thread_id: str | None
    budget_bytes: int
    query: str | None
    archival_mode: str
    archival_limit: int
    archival_min_score: float
    include_agent_core: bool
    include_user_core: bool
    format: str
    explain: bool


def parse_hydrate(principal: Principal, data: Any) -> HydrateParams:
    data = validation.require_object(data)
    validation.reject_unknown(data, HYDRATE_FIELDS)
    min_score = data.get("archival_min_score")
    return HydrateParams(
        subject_id=principal.resolve_subject(
            validation.identifier(data.get("subject_id"), "subject_id")
        ),
        thread_id=validation.thread(data),
        budget_bytes=_int(
            data,
            "budget_bytes",
            principal.agent.hydration_budget_bytes,
            low=0,
            high=settings.DATA_UPLOAD_MAX_MEMORY_SIZE * 16,
        ),
        query=_query(data, required=False),
        archival_mode=validation.choice(
            data.get("archival_mode"), "archival_mode", ARCHIVAL_MODES, "tool_only"
        ),
        archival_limit=_int(data, "archival_limit", 5, low=0, high=MAX_LIMIT),
        archival_min_score=(
            0.3 if min_score is None else validation.unit_float(min_score, "archival_min_score")
        ),
        include_agent_core=validation.parse_bool(
            data.get("include_agent_core"), "include_agent_core", True
        ),
        include_user_core=validation.parse_bool(
            data.get("include_user_core"), "include_user_core", True
        ),
        format=validation.choice(data.get("format"), "format", ("json", "markdown"), "json"),
        explain=validation.parse_bool(data.get("explain"), "explain", False),
    )


HYDRATE_BATCH = 300
HYDRATE_MIN_BATCH = 32
TYPICAL_BYTES = 48


class _Budget:
    def __init__(self, total: int):
        self.total = total
        self.used = 0

    @property
    def left(self) -> int:
        return self.total - self.used

    def take(self, size: int) -> bool:
        if size <= self.left:
            self.used += size
            return True
        return False


def _hydrate_pools(principal: Principal, params: HydrateParams, now: datetime):
    """The core pool and the recency pool, each as its parts by owner (see `_newest`)."""
    parts = visible_memories_by_owner(
        tenant=principal.tenant,
        agent=principal.agent,
        subject_id=params.subject_id,
        include_shared=True,
        now=now,
    )
    core = [part.filter(category=Category.CORE) for part in parts]
    if not params.include_agent_core:
        core = [part.exclude(subject_id__isnull=True) for part in core]
    if not params.include_user_core:
        core = [part.filter(subject_id__isnull=True) for part in core]
    recent = [part.exclude(category__in=[Category.CORE, Category.ARCHIVAL]) for part in parts]
    if params.thread_id:
        thread_q = ~Q(category=Category.CONVERSATION) | Q(thread_id=params.thread_id)
        recent = [part.filter(thread_q) for part in recent]
    else:
        recent = [part.exclude(category=Category.CONVERSATION) for part in recent]
    return core, recent


NEWEST = ("-updated_at", "-id")


def _newest(parts: list[QuerySet]) -> QuerySet:
    """(id, size_bytes, updated_at) of the parts' rows, newest first."""
    rows = [part.values_list("id", "size_bytes", "updated_at").order_by(*NEWEST) for part in parts]
    return rows[0] if len(rows) == 1 else rows[0].union(*rows[1:], all=True).order_by(*NEWEST)


class _NewestFirst:
    """A newest-first walk over a pool's parts by owner, in batches of what still fits.

    Each part is compiled once (the ORM's compile costs more than the query itself); a batch
    is each part's index walk newest first, cut at the budget left and the last row seen, and
    PostgreSQL merges the walks (the parts are simple subqueries, pulled up into index scans).
    """

    def __init__(self, pool: list[QuerySet]):
        self.parts = [_sql(part.values_list("id", "size_bytes", "updated_at")) for part in pool]

    def batch(
        self, *, max_size: int, after: tuple[datetime, str] | None, limit: int
    ) -> list[tuple[str, int, datetime]]:
        where, extra = "size_bytes <= %s", [max_size]
        if after is not None:
            where += " AND (updated_at < %s OR (updated_at = %s AND id < %s))"
            extra += [after[0], after[0], after[1]]
        branches, params = [], []
        for sql, part_params in self.parts:
            branches.append(
                f"(SELECT id, size_bytes, updated_at FROM ({sql}) part WHERE {where} "
                "ORDER BY updated_at DESC, id DESC LIMIT %s)"
            )
            params += [*part_params, *extra, limit]
        statement = " UNION ALL ".join(branches) + " ORDER BY 3 DESC, 1 DESC LIMIT %s"
        with connection.cursor() as cursor:
            cursor.execute(statement, [*params, limit])
            return cursor.fetchall()


def _fill(pool: list[QuerySet], budget: _Budget, taken: list, reason: str, seen: set[str]) -> None:
    """Newest first; skip what does not fit; stop reading once nothing more can fit.

    Only (id, size, updated_at) is read here, in batches of candidates no larger than the
    budget left, so an agent with 10k memories costs a query or two; the chosen memories are
    written out afterwards by `_entries`, in one statement.
    """
    walk = _NewestFirst(pool)
    after: tuple[datetime, str] | None = None
    while budget.left > 0:
        # Enough rows for the budget left at a typical memory size; more batches if not.
        size = max(HYDRATE_MIN_BATCH, min(HYDRATE_BATCH, budget.left // TYPICAL_BYTES))
        batch = walk.batch(max_size=budget.left, after=after, limit=size)
        for memory_id, size_bytes, _ in batch:
            if memory_id not in seen and budget.take(size_bytes):
                taken.append((memory_id, reason, size_bytes))
                seen.add(memory_id)
        if len(batch) < size:
            return
        after = (batch[-1][2], batch[-1][0])


ENTRY_SQL = (
    f"SELECT m.id, {memory_json_sql()} FROM {Memory._meta.db_table} m "
    "JOIN unnest(%s::text[], %s::int[]) AS chosen(id, size_bytes) "
    "ON chosen.id = m.id AND chosen.size_bytes = m.size_bytes "
    f"LEFT JOIN {Agent._meta.db_table} o ON o.id = m.agent_id "
    "WHERE m.tenant_id = %s AND m.status = 'active' AND (m.expires_at IS NULL OR m.expires_at > %s)"
)


def _entries(
    principal: Principal, taken: list[tuple[str, str, int]], budget: _Budget, now: datetime
) -> list[bytes]:
    """The chosen memories as JSON objects with their `reason`, in the order chosen.

    They are read again by id, a moment after the walk chose them: one forgotten, expired or
    rewritten to another size in between is left out (and its bytes given back) rather than
    returned dead or over the budget.
    """
    if not taken:
        return []
    ids, sizes = [mid for mid, _, _ in taken], [size for _, _, size in taken]
    with connection.cursor() as cursor:
        cursor.execute(ENTRY_SQL, [principal.agent.pk, ids, sizes, principal.tenant.pk, now])
        built = dict(cursor.fetchall())
    entries = []
    for mid, reason, size in taken:
        if mid in built:
            entries.append(f'{built[mid][:-1]},"reason":"{reason}"}}'.encode())
        else:
            budget.used -= size
    return entries


def _omitted(pools: list[list[QuerySet]], seen: set[str], budget_total: int) -> list[dict]:
    omitted = []
    for pool in pools:
        for mid, size, _ in _newest(pool):
            if mid not in seen:
                reason = "too_big" if size > budget_total else "windowed"
                omitted.append({"memory_id": mid, "reason": reason})
                seen.add(mid)
    return omitted


def _archival_matches(
    principal: Principal, params: HydrateParams, now: datetime
) -> list[tuple[str, float]]:
    search_params = SearchParams(
        query=params.query or "",
        subject_id=params.subject_id,
        categories=[Category.ARCHIVAL],
    )
    scope = search_scope(principal, search_params, now)
    embedder = get_embedder()
    return ranked_ids(
        scope,
        query=params.query,
        vector=embedder.embed([params.query])[0],
        mode="hybrid",
        limit=params.archival_limit,
        min_score=params.archival_min_score,
        model=embedder.model_name,
    )


def _markdown(entries: list[dict], bytes_used: int, budget: int) -> str:
    lines = [f"## Memory context ({len(entries)} entries, {bytes_used}/{budget} bytes)"]
    current = None
    for memory in entries:
        reason = memory["reason"]
        heading = "archival matches" if reason == "archival_match" else memory["category"]
        if heading != current:
            lines.append(f"\n### {heading}")
            current = heading
        label = f"**{memory['key']}**: " if memory["key"] else ""
        text = " ".join(memory["text"].split()) if memory["text"] else ""
        if memory["data"]:
            data = json.dumps(memory["data"], ensure_ascii=False, separators=(",", ":"))
            text = f"{text} {data}".strip()
        stamp = memory["updated_at"][:10]
        tags = f" #{' #'.join(memory['tags'])}" if memory["tags"] else ""
        lines.append(f"- {label}{text} ({stamp}){tags}")
    return "\n".join(lines) + "\n"


def hydrate_body(*, principal: Principal, data: dict, now: datetime | None = None) -> dict:
    """POST /api/v1/hydrate: the context an agent loads at the start of a run (SPEC §4).

    The entries are `orjson.Fragment`s (JSON text PostgreSQL wrote): the API renders them as
    they are; `memory_hydrate` gives the same body as plain Python data.
    """
    principal.require_scope("read")
    now = resolve_now(now)
    params = parse_hydrate(principal, data)
    core, recent = _hydrate_pools(principal, params, now)
    budget = _Budget(params.budget_bytes)
    taken: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    _fill(core, budget, taken, "core", seen)
    _fill(recent, budget, taken, "recent", seen)
    pools = [core, recent]
    if params.archival_mode == "auto" and params.query and params.archival_limit:
        matches = [mid for mid, _ in _archival_matches(principal, params, now)]
        sizes = dict(
            Memory.objects.for_tenant(principal.tenant)
            .filter(pk__in=matches)
            .values_list("id", "size_bytes")
        )
        for mid in matches:
            if mid in sizes and mid not in seen and budget.take(sizes[mid]):
                taken.append((mid, "archival_match", sizes[mid]))
                seen.add(mid)
        pools.append(
            [
                visible_memories(
                    tenant=principal.tenant,
                    agent=principal.agent,
                    subject_id=params.subject_id,
                    now=now,
                ).filter(pk__in=matches)
            ]
        )
    entries = _entries(principal, taken, budget, now)
    body: dict[str, Any] = {
        "ok": True,
        "entries": [orjson.Fragment(entry) for entry in entries],
        "bytes_used": budget.used,
        "budget_bytes": budget.total,
    }
    if params.format == "markdown":
        body["markdown"] = _markdown(
            [orjson.loads(entry) for entry in entries], budget.used, budget.total
        )
    if params.explain:
        body["omitted"] = _omitted(pools, set(seen), budget.total)
    bump_access(principal.tenant.pk, [mid for mid, _, _ in taken], now)
    return body


def memory_hydrate(*, principal: Principal, data: dict, now: datetime | None = None) -> dict:
    """`hydrate_body` as plain Python data (for MCP, the console and tests)."""
    return orjson.loads(orjson.dumps(hydrate_body(principal=principal, data=data, now=now)))

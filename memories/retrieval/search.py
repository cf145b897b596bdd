"""Search (docs/api.md): the LLM-facing result list of `POST /api/v1/search` and `memory_search`.

Visibility comes from `memories.visibility` only; expired and tombstoned memories are never
candidates because every search starts from `visible_memories` (`search_scope`).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from django.db import connection
from django.db.models import BooleanField, Field, Q, QuerySet
from django.db.models.expressions import RawSQL

from accounts.models import Agent
from accounts.principal import Principal
from memories.access import bump_access
from memories.clock import resolve_now
from memories.compiled import (
    CompiledQuery,
    CompiledSQL,
    RowLoader,
    Slot,
    principal_values,
    slot_principal,
    written_in,
)
from memories.embeddings import get_embedder
from memories.models import PUBLIC_FIELDS, Category, Memory, MemoryRevision
from memories.retrieval.formats import search_hit_json
from memories.retrieval.params import SearchParams, parse_search
from memories.retrieval.ranking import (
    TSQUERY_SQL,
    RankingArgs,
    branches_allowed,
    fusion_sql,
    ranking_sql,
    run_branches,
    run_ranking,
    run_ranking_rows,
    sql_with_params,
)
from memories.serialization import iso
from memories.visibility import reads_from_ids, visible_memories

# `(exact, part=None) -> (sql, params)`: a search's ranking statement (`ranking_sql`'s, a branch
# of it with `part`).
Statement = Callable[..., tuple[str, list[Any]]]


def search_scope(principal: Principal, params: SearchParams, now: datetime) -> QuerySet[Memory]:
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
    if params.key_prefix:  # startswith escapes LIKE's wildcards: a literal prefix
        qs = qs.filter(key__startswith=params.key_prefix)
    return qs


def _owner_slugs(principal: Principal, memories: Iterable[Memory]) -> dict[int, str]:
    """Owner slugs of these memories (one query, and none when all are own or workspace)."""
    slugs = {principal.agent.pk: principal.agent.slug}
    others = {m.agent_id for m in memories if m.agent_id and m.agent_id not in slugs}
    if others:
        slugs.update(
            Agent.objects.for_tenant(principal.tenant)
            .filter(pk__in=others)
            .values_list("pk", "slug")
        )
    return slugs


@dataclass(frozen=True)
class _ScopeShape:
    """What makes two searches' scopes (`search_scope`) differ in more than their values."""

    subject: bool
    shared: int
    thread: bool
    categories: int
    kind: bool


@dataclass(frozen=True)
class _Shape:
    """What makes two searches' statements differ in more than their values."""

    mode: str
    depth: int
    min_score: bool
    model: bool
    dates: bool
    scope: _ScopeShape


def vector_owners(principal: Principal, shared: list[int]) -> Q:
    """The owners a `search_scope` memory can have, as a filter on the vectors' table: every
    memory it lets through is the agent's, a shared agent's (`shared`: their ids), or nobody's
    (workspace and user memories), by `visibility.visible_q`."""
    return Q(vector__tenant_id=principal.tenant.pk) & (
        Q(vector__agent_id__in=[principal.agent.pk, *shared]) | Q(vector__agent_id__isnull=True)
    )


def _slot_scope(
    slots: Slot, shape: _ScopeShape, principal: Principal | None = None
) -> QuerySet[Memory]:
    """`search_scope` with `slots` for the principal (or this one, of slots), the filters and
    `now`."""
    principal = principal or slot_principal(slots, shared=shape.shared)
    params = SearchParams(
        query="",
        categories=[slots.text(f"category{i}") for i in range(shape.categories)],
        kind=slots.text("kind") if shape.kind else None,
        subject_id=slots.text("subject") if shape.subject else None,
        thread_id=slots.text("thread") if shape.thread else None,
        include_shared=shape.shared > 0,
    )
    return search_scope(principal, params, slots.time("now"))


@lru_cache(maxsize=256)
def _compiled_ranking(shape: _Shape, exact: bool, part: str | None = None) -> CompiledSQL:
    """The ranking statement over `search_scope` for one shape, compiled once per process
    (`memories.compiled`): building the scope's and the ranking's querysets costs a sizeable
    share of what the statement itself takes (docs/performance.md#code-figures).

    The exact statement (no HNSW walk, `ranked_search`'s for a small scope) has the shape's
    constants written in (`inline`), so that one generic plan serves it: its plan does not
    depend on the request's values, and planning it each time cost a large share of its
    time."""
    slots = Slot()
    principal = slot_principal(slots, shared=shape.scope.shared)
    scope = _slot_scope(slots, shape.scope, principal)
    scope_slots = frozenset(slots.names.values())
    args = RankingArgs(
        query="" if shape.mode == "semantic" else slots.text("query"),
        vector=None if shape.mode == "keyword" else slots.text("vector"),
        mode=shape.mode,
        limit=slots.int("limit"),
        depth=shape.depth,
        min_score=slots.float("min_score") if shape.min_score else None,
        model=slots.text("model") if shape.model else None,
        dates=(slots.text("years"), slots.text("months"), slots.text("days"))
        if shape.dates
        else None,
        vector_owners=vector_owners(principal, principal.agent._reads_from_ids),
    )
    # The HNSW statement is not `inline`: PostgreSQL plans it for each request's values (a
    # custom plan). A generic plan, forced, ran as fast for an agent with many memories but
    # walked the HNSW graph where a selective filter wants an exact scan: at 1M memories a
    # search filtered by `subject_id` or `categories` was several times slower
    # (docs/performance.md#code-figures).
    # A branch alone (`part`) holds the scope's slots, not all of the request's: the other
    # branch's and the mixing's are left out.
    optional = frozenset() if part is None else frozenset(slots.names.values()) - scope_slots
    return CompiledSQL(
        *ranking_sql(scope, args, exact=exact, part=part),
        slots,
        inline=exact,
        optional=optional,
    )


# A scope of at most this many memories is ranked by the exact statement at once, with its
# generic plan: an exact scan of that many vectors costs less than the planning of the HNSW
# statement it replaces. (0: always the HNSW statement first.)
EXACT_SCOPE = 2_000
# How long a process trusts a scope's size, in seconds. A size out of date costs time, never
# results: both statements rank the same scope, the exact one completely.
SCOPE_SIZE_TTL = 60.0
_SCOPE_SIZES_KEPT = 10_000
_scope_sizes: dict[tuple[Any, ...], tuple[bool, float]] = {}


@lru_cache(maxsize=256)
def _compiled_scope_size(shape: _ScopeShape, bound: int) -> CompiledSQL:
    """The scope's size up to `bound + 1` (a count that stops reading there)."""
    slots = Slot()
    sql, params = sql_with_params(_slot_scope(slots, shape).values("id")[: bound + 1])
    return CompiledSQL(f"SELECT count(*) FROM ({sql}) s", params, slots, inline=True)


def small_scope(shape: _ScopeShape, values: dict[str, Any]) -> bool:
    """Whether the scope these values bind holds `EXACT_SCOPE` memories at most: measured by
    one count, then taken from this process's memory for `SCOPE_SIZE_TTL` seconds."""
    bound = EXACT_SCOPE
    if bound <= 0:
        return False
    count = _compiled_scope_size(shape, bound)
    # The scope is what the count binds: tenant, agent, shared agents, filters (not `now`).
    key = (shape, bound, *(values[name] for _, name in count.positions if name != "now"))
    now = time.monotonic()
    known = _scope_sizes.get(key)
    if known is not None and known[1] > now:
        return known[0]
    with connection.cursor() as cursor:
        cursor.execute(*count.bind(**values))
        small: bool = cursor.fetchone()[0] <= bound
    if len(_scope_sizes) >= _SCOPE_SIZES_KEPT:
        _scope_sizes.clear()
    _scope_sizes[key] = (small, now + SCOPE_SIZE_TTL)
    return small


def ranked_search(
    principal: Principal,
    params: SearchParams,
    now: datetime,
    *,
    vector: list[float] | None,
    model: str | None,
) -> list[tuple[str, float]]:
    """`ranked_ids` of `params.query` over `search_scope(principal, params, now)`: what search
    and hydrate's archival match rank, through `search_statement`."""
    statement, args, small = _ranking(principal, params, now, vector=vector, model=model)
    return run_ranking(
        statement, has_vector=vector is not None, depth=args.depth, exact=small is True
    )


def _ranking(
    principal: Principal,
    params: SearchParams,
    now: datetime,
    *,
    vector: list[float] | None,
    model: str | None,
) -> tuple[Statement, RankingArgs, bool | None]:
    """`search_statement` of the request's `RankingArgs`, those, and whether the scope is small
    (`small_scope`: the exact statement at once); None where its size is not counted (a request
    with `tags` or `key_prefix`)."""
    args = RankingArgs.of(
        query=params.query,
        vector=vector,
        mode=params.mode,
        limit=params.limit,
        min_score=params.min_score,
        model=model,
    )
    compiled = _shape_and_values(principal, params, now, args)
    small = None if compiled is None else small_scope(compiled[0].scope, compiled[1])
    return _statement(principal, params, now, args, compiled), args, small


def _ranked_hits(
    principal: Principal,
    params: SearchParams,
    now: datetime,
    *,
    vector: list[float] | None,
    model: str | None,
) -> tuple[list[tuple[str, float]], dict[str, Memory]]:
    """`ranked_search`, and the ranked memories' rows (their response fields) read by the same
    statement: a search's hits cost no round trip of their own."""
    statement, args, small = _ranking(principal, params, now, vector=vector, model=model)
    tenant_id = principal.tenant.pk
    rows = None
    if args.mode == "hybrid" and small is False and branches_allowed():
        # A large scope: its branches at once on two connections, then mixed.
        rows = run_branches(
            lambda: statement(False, "keyword"),
            lambda exact: statement(exact, "semantic"),
            lambda keyword, semantic: _hit_rows(tenant_id, fusion_sql(args, keyword, semantic)),
            depth=args.depth,
        )
    if rows is None:
        rows = run_ranking_rows(
            _with_hit_rows(tenant_id, statement),
            has_vector=vector is not None,
            depth=args.depth,
            exact=small is True,
        )
    memories = cast(list[Memory], _HIT_LOADER.load([row[3:] for row in rows]))  # Memory rows
    return [(row[0], float(row[1])) for row in rows], {m.pk: m for m in memories}


def search_statement(
    principal: Principal, params: SearchParams, now: datetime, args: RankingArgs
) -> Statement:
    """`exact, part=None -> ranking_sql(search_scope(principal, params, now), args, exact=exact,
    part=part)`, from the statement compiled once for the request's shape. A request with
    `tags` or `key_prefix` (values the ORM rewrites on their way to SQL: an array, an escaped
    LIKE pattern) has its statement built for it."""
    compiled = _shape_and_values(principal, params, now, args)
    return _statement(principal, params, now, args, compiled)


def _statement(
    principal: Principal,
    params: SearchParams,
    now: datetime,
    args: RankingArgs,
    compiled: tuple[_Shape, dict[str, Any]] | None,
) -> Statement:
    if compiled is None:
        scope = search_scope(principal, params, now)
        return lambda exact, part=None: _planned_per_request(
            ranking_sql(scope, args, exact=exact, part=part), args, exact
        )
    shape, values = compiled
    return lambda exact, part=None: _planned_per_request(
        _compiled_ranking(shape, exact, part).bind(**values), args, exact
    )


def _planned_per_request(
    statement: tuple[str, list[Any]], args: RankingArgs, exact: bool
) -> tuple[str, list[Any]]:
    """The ranking over a large scope (not `exact`) with its query vector written in: a
    statement of its own for each request, so never a prepared one, and planned for its values
    (a selective filter wants the exact scan, not the HNSW walk). `plan_cache_mode=auto` chose
    the per-request plan by itself until the vectors moved to a table of their own; joined to
    it, the generic plan's estimate looked as cheap, and after five executions it took that."""
    if exact or args.vector is None:
        return statement
    vector = args.vector
    return written_in(*statement, lambda value: isinstance(value, str) and value == vector)


def _shape_and_values(
    principal: Principal, params: SearchParams, now: datetime, args: RankingArgs
) -> tuple[_Shape, dict[str, Any]] | None:
    """The compiled statement's shape for this request and the values of its slots; None for
    a request with `tags` or `key_prefix` (`search_statement`)."""
    if params.tags or params.key_prefix:
        return None
    shared = reads_from_ids(principal.agent) if params.include_shared else []
    shape = _Shape(
        mode=args.mode,
        depth=args.depth,
        min_score=args.min_score is not None,
        model=args.model is not None,
        dates=args.dates is not None,
        scope=_ScopeShape(
            subject=bool(params.subject_id),
            shared=len(shared),
            thread=bool(params.thread_id),
            categories=len(params.categories),
            kind=bool(params.kind),
        ),
    )
    values = {
        **principal_values(principal, shared),
        "now": now,
        "subject": params.subject_id,
        "thread": params.thread_id,
        "kind": params.kind,
        "query": args.query,
        "vector": args.vector,
        "limit": args.limit,
        "min_score": args.min_score,
        "model": args.model,
        **{f"category{i}": name for i, name in enumerate(params.categories)},
        **dict(zip(("years", "months", "days"), args.dates or (), strict=False)),
    }
    return shape, values


# What the hits read: the public fields' columns (`agent` is its id here), never the embedding or
# the tsvector (the bulk of a row).
RESPONSE_FIELDS = tuple(
    # Every public field but `source` is a column of the row.
    cast("Field[Any, Any]", Memory._meta.get_field(name)).attname
    for name in PUBLIC_FIELDS
    if name != "source"
)


@lru_cache(maxsize=128)
def _compiled_fetch(count: int) -> CompiledQuery:
    slots = Slot()
    ids = [slots.text(f"id{i}") for i in range(count)]
    return CompiledQuery(
        Memory.objects.for_tenant(slots.int("tenant")).filter(pk__in=ids).only(*RESPONSE_FIELDS),
        slots,
    )


# The same fields, read with the ranking (`_with_hit_rows`), in the model's order.
_HIT_FIELDS = [f for f in Memory._meta.concrete_fields if f.attname in RESPONSE_FIELDS]
_HIT_LOADER = RowLoader(Memory, _HIT_FIELDS, [])
_HIT_SQL = (
    "WITH ranked AS MATERIALIZED ({ranking}) SELECT r.id, r.relevance, r.score, "
    + ", ".join(f"m.{field.column}" for field in _HIT_FIELDS)
    + f" FROM ranked r LEFT JOIN {Memory._meta.db_table} m ON m.tenant_id = %s AND m.id = r.id"
)


def _with_hit_rows(tenant_id: int, statement: Statement) -> Callable[[bool], tuple[str, list[Any]]]:
    """The ranking statement, each ranked memory's response fields after its id, relevance and
    score (the HNSW walk's count row, id NULL, has none)."""
    return lambda exact: _hit_rows(tenant_id, statement(exact))


def _hit_rows(tenant_id: int, ranking: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
    sql, params = ranking
    return _HIT_SQL.format(ranking=sql), [*params, tenant_id]


def _fetch(tenant_id: int, ids: list[str]) -> dict[str, Memory]:
    """The hits' rows (their response fields only), by id."""
    ids = list(dict.fromkeys(ids))
    if not ids:
        return {}
    values = {f"id{i}": memory_id for i, memory_id in enumerate(ids)}
    fetched = cast(list[Memory], _compiled_fetch(len(ids)).fetch(tenant=tenant_id, **values))
    return {m.pk: m for m in fetched}


def _history_hits(
    principal: Principal, scope: QuerySet[Memory], params: SearchParams, limit: int
) -> list[tuple[MemoryRevision, float]]:
    """Older texts of visible memories (from revisions) that match the query by full text."""
    revisions = (
        MemoryRevision.objects.for_tenant(principal.tenant)
        .filter(memory_id__in=scope.values("id"), before__text__isnull=False)
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


def memory_search(
    *, principal: Principal, data: dict[str, Any], now: datetime | None = None
) -> dict[str, Any]:
    """POST /api/v1/search: the LLM-facing result list."""
    principal.require_scope("read")
    now = resolve_now(now)
    params = parse_search(principal, data)
    vector = model = None
    if params.mode in ("semantic", "hybrid"):
        embedder = get_embedder()
        vector, model = embedder.embed([params.query])[0], embedder.model_name
    ranked, rows = _ranked_hits(principal, params, now, vector=vector, model=model)
    history = []
    if params.include_history:
        scope = search_scope(principal, params, now)
        history = [
            (revision, score)
            for revision, score in _history_hits(principal, scope, params, params.limit)
            if params.min_score is None or score >= params.min_score
        ]
    rows.update(
        _fetch(principal.tenant.pk, [r.memory_id for r, _ in history if r.memory_id not in rows])
    )
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

"""Search (SPEC §4): the LLM-facing result list of `POST /api/v1/search` and `memory_search`.

Visibility comes from `memories.visibility` only; expired and tombstoned memories are never
candidates because every search starts from `visible_memories` (`search_scope`).
"""

from __future__ import annotations

import copy
from datetime import datetime
from types import SimpleNamespace

from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL

from accounts.models import Agent
from accounts.principal import Principal
from memories.access import bump_access
from memories.clock import resolve_now
from memories.embeddings import get_embedder
from memories.models import PUBLIC_FIELDS, Category, Memory, MemoryRevision
from memories.retrieval.formats import search_hit_json
from memories.retrieval.params import SearchParams, parse_search
from memories.retrieval.ranking import TSQUERY_SQL, ranked_ids
from memories.serialization import iso
from memories.visibility import visible_memories


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
    if params.key_prefix:  # startswith escapes LIKE's wildcards: a literal prefix
        qs = qs.filter(key__startswith=params.key_prefix)
    return qs


def _owner_slugs(principal: Principal, memories) -> dict[int, str]:
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


# What the hits read: the public fields' columns (`agent` is its id here), never the embedding or
# the tsvector (the bulk of a row).
RESPONSE_FIELDS = tuple(
    Memory._meta.get_field(name).attname for name in PUBLIC_FIELDS if name != "source"
)


class _Row(SimpleNamespace):
    """A memory's response fields as plain attributes: what `search_hit_json` reads, without
    building a model instance per row."""

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

"""Console reads: operators see every memory of their tenant, whatever its status.

Every queryset starts from `Memory.objects.for_tenant(tenant)`. Lists are keyset-paginated
(`(sort value, id)` cursors) and run a fixed number of queries whatever the page size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import (
    Count,
    Q,
    QuerySet,
    Sum,
    TextField,
    Value,
)
from django.db.models.functions import Cast, Coalesce, Left, Length
from django.http import Http404

from accounts.models import Agent, Tenant
from memories.clock import resolve_now
from memories.cursors import keyset_page
from memories.embeddings import get_embedder
from memories.models import (
    JobRun,
    Memory,
    MemoryQuerySet,
    MemoryRevision,
    ReviewState,
    Scope,
    Status,
)
from memories.retrieval.ranking import ranked_ids

PAGE_SIZE = 50
SEARCH_LIMIT = 100

# Sort keys the table offers: name → (field, descending).
SORTS: dict[str, tuple[str, bool]] = {
    "-updated_at": ("updated_at", True),
    "updated_at": ("updated_at", False),
    "-created_at": ("created_at", True),
    "created_at": ("created_at", False),
    "-importance": ("importance", True),
    "importance": ("importance", False),
}
DEFAULT_SORT = "-updated_at"

FILTER_FIELDS = (
    "agent",
    "subject",
    "thread",
    "category",
    "kind",
    "tag",
    "status",
    "capture_mode",
    "review_state",
    "expires",
    "q",
)
# `expires` filter: live memories expiring within the window (the dashboard's "Expiring in
# 24 h" links to `24h`), or `never` for those without an expiry.
EXPIRY_WINDOWS = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
# Result counts stop here: counting a huge tenant's rows exactly would cost more than the page.
COUNT_CAP = 1000


@dataclass
class Page:
    items: list[Any]
    next_cursor: str | None = None
    searched: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    # Rows matching in all pages, up to COUNT_CAP + 1 (more shows as "1000+"); None: not counted.
    total: int | None = None

    @property
    def total_capped(self) -> bool:
        return self.total is not None and self.total > COUNT_CAP


def bounded_count(qs: QuerySet) -> int:
    """How many rows, counting no further than COUNT_CAP + 1 (one query, bounded cost)."""
    return qs.order_by()[: COUNT_CAP + 1].count()


def page_of(qs: QuerySet, *, field_name: str, desc: bool, cursor: str | None, size: int) -> Page:
    rows, next_cursor = keyset_page(qs, field_name=field_name, desc=desc, cursor=cursor, size=size)
    return Page(items=rows, next_cursor=next_cursor)


# --- memories --------------------------------------------------------------------------------


def tenant_memories(tenant: Tenant) -> MemoryQuerySet:
    return Memory.objects.for_tenant(tenant)


def memory_for_console(*, tenant: Tenant, memory_id: str) -> Memory:
    """One memory of the tenant (any status); another tenant's id is a 404 like a missing one."""
    memory = tenant_memories(tenant).select_related("agent").filter(pk=memory_id).first()
    if memory is None:
        raise Http404("No such memory")
    return memory


def agents_for(tenant: Tenant) -> list[Agent]:
    return list(Agent.objects.for_tenant(tenant).order_by("slug"))


def core_over_limits(*, tenant: Tenant, agents: list[Agent], now=None) -> dict[int, dict]:
    """The agents whose live core is over their block limits, with the most one
    hydrate would find in their core block: the subject-less core plus the fullest subject's.
    {agent id: {"entries", "chars"}}, from one grouping query."""
    chars = Length("text") + Coalesce(Length(Cast("data", TextField())), Value(0))
    rows = (
        tenant_memories(tenant)
        .live(resolve_now(now))
        .filter(category="core", agent__isnull=False)
        .values_list("agent_id", "subject_id")
        .annotate(n=Count("id"), chars=Sum(chars))
        .order_by()
    )
    most: dict[int, list[int]] = {}  # agent → [base n, base chars, subject n, subject chars]
    for agent_id, subject_id, n, total in rows:
        usage = most.setdefault(agent_id, [0, 0, 0, 0])
        at = 0 if subject_id is None else 2
        usage[at], usage[at + 1] = max(usage[at], n), max(usage[at + 1], total)
    over = {}
    for agent in agents:
        usage = most.get(agent.pk, [0, 0, 0, 0])
        entries, total = usage[0] + usage[2], usage[1] + usage[3]
        if entries > agent.core_max_entries or total > agent.core_max_chars:
            over[agent.pk] = {"entries": entries, "chars": total}
    return over


def _filtered(tenant: Tenant, filters: dict[str, str], now: datetime) -> QuerySet:
    qs = tenant_memories(tenant).select_related("agent")
    agent = filters.get("agent")
    if agent == "workspace":
        qs = qs.filter(agent__isnull=True, scope=Scope.AGENT)
    elif agent == "user":  # every subject's user-scoped memories
        qs = qs.filter(scope=Scope.USER)
    elif agent:
        qs = qs.filter(agent__slug=agent)
    for name, column in (
        ("subject", "subject_id"),
        ("thread", "thread_id"),
        ("category", "category"),
        ("kind", "kind"),
        ("capture_mode", "capture_mode"),
        ("review_state", "review_state"),
    ):
        if filters.get(name):
            qs = qs.filter(**{column: filters[name]})
    tags = [t for t in filters.get("tags", []) if t]
    if tags:
        qs = qs.filter(tags__contains=tags)
    expires = filters.get("expires")
    if expires in EXPIRY_WINDOWS:
        # Not yet expired: a memory past its expiry (the sweep not run yet) is not "expiring".
        qs = qs.filter(expires_at__gt=now, expires_at__lte=now + EXPIRY_WINDOWS[expires])
    elif expires == "never":
        qs = qs.filter(expires_at__isnull=True)
    status = filters.get("status") or Status.ACTIVE
    if status == "live":
        qs = qs.live(now)
    elif status != "any":
        qs = qs.filter(status=status)
    return qs


def memory_filtered(*, tenant: Tenant, filters: dict[str, Any], now=None) -> QuerySet:
    """The tenant's memories narrowed by the console filters (export and bulk share these)."""
    return _filtered(tenant, filters, resolve_now(now))


def memory_page(
    *,
    tenant: Tenant,
    filters: dict[str, Any],
    sort: str = DEFAULT_SORT,
    cursor: str | None = None,
    size: int = PAGE_SIZE,
    now: datetime | None = None,
) -> Page:
    """The console table: filtered, sorted, keyset-paginated; a text query ranks instead."""
    now = resolve_now(now)
    qs = _filtered(tenant, filters, now)
    query = (filters.get("q") or "").strip()
    if query:
        return Page(items=text_search(qs, query, limit=min(size, SEARCH_LIMIT)), searched=True)
    field_name, desc = SORTS.get(sort, SORTS[DEFAULT_SORT])
    page = page_of(qs, field_name=field_name, desc=desc, cursor=cursor, size=size)
    page.total = bounded_count(qs)
    return page


def text_search(qs: QuerySet, query: str, *, limit: int) -> list[Memory]:
    """The API's hybrid search (`memories.retrieval.ranking.ranked_ids`) over the console's own
    scope, best first, each memory with its `relevance` (0–1, as search answers it).

    Operators search every memory of the filtered queryset (any agent, any status), so this
    cannot go through the agent-facing `memory_search`, which applies one agent's visibility;
    it calls the same one-statement ranking with the console's tenant-scoped queryset instead.
    """
    vector = get_embedder().embed([query])[0]
    ranked = ranked_ids(
        qs.select_related(None), query=query, vector=vector, mode="hybrid", limit=limit
    )
    by_id = {m.pk: m for m in qs.filter(pk__in=[pk for pk, _ in ranked])}
    found = []
    for pk, score in ranked:
        if pk in by_id:
            memory = by_id[pk]
            memory.relevance = min(max(score, 0.0), 1.0)  # as search's `quality.relevance`
            found.append(memory)
    return found


def near_duplicates_by_memory(
    *, tenant: Tenant, memory_ids: list[str], min_similarity: float = 0.8, per_memory: int = 3
) -> dict[str, list[dict]]:
    """Active look-alikes of each memory, by the store's rule (`memories.dedup`), in a fixed
    number of queries whatever the number of memories."""
    if not memory_ids:
        return {}
    from memories import dedup

    probes = [
        dedup.Probe(
            content_hash=content_hash, embedding=embedding, embedding_model=model, memory_id=pk
        )
        for pk, content_hash, embedding, model in Memory.objects.for_tenant(tenant)
        .filter(pk__in=list(memory_ids), vector__isnull=False)
        .values_list("pk", "content_hash", "vector__embedding", "embedding_model")
    ]
    candidates = Memory.objects.for_tenant(tenant).filter(status=Status.ACTIVE)
    found = dedup.near_duplicates(candidates, probes, threshold=min_similarity, limit=per_memory)
    out: dict[str, list[dict]] = {pk: [] for pk in memory_ids}
    for probe, near in zip(probes, found, strict=True):
        out[probe.memory_id] = [  # type: ignore[index]  # each probe has its memory's id
            {
                "memory_id": memory.id,
                "text": memory.text,
                "version": memory.version,
                "similarity": round(similarity, 3),
            }
            for memory, similarity in near
        ]
    return out


def review_page(
    *, tenant: Tenant, cursor: str | None = None, size: int = PAGE_SIZE, now=None
) -> Page:
    """Pending live memories, oldest first."""
    qs = (
        tenant_memories(tenant)
        .live(resolve_now(now))
        .filter(review_state=ReviewState.PENDING)
        .select_related("agent")
    )
    page = page_of(qs, field_name="created_at", desc=False, cursor=cursor, size=size)
    page.total = bounded_count(qs)
    return page


def tombstone_page(*, tenant: Tenant, cursor: str | None = None, size: int = PAGE_SIZE) -> Page:
    """Tombstoned memories, most recently forgotten first.

    `status_changed_at` may be NULL (an imported backup, older rows); a keyset over a NULL
    sort value cannot resume (`NULL < x` is never true) and would repeat page one, so the sort
    key is never NULL: the status change time, else the last update.
    """
    qs = (
        tenant_memories(tenant)
        .filter(status=Status.TOMBSTONED)
        .select_related("agent")
        .annotate(forgotten_at=Coalesce("status_changed_at", "updated_at"))
    )
    return page_of(qs, field_name="forgotten_at", desc=True, cursor=cursor, size=size)


def revisions_for(*, tenant: Tenant, memory: Memory) -> list[MemoryRevision]:
    return list(
        MemoryRevision.objects.for_tenant(tenant).filter(memory_id=memory.pk).order_by("-id")[:200]
    )


def activity_page(
    *,
    tenant: Tenant,
    actor: str = "",
    change_type: str = "",
    cursor: str | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    qs = MemoryRevision.objects.for_tenant(tenant)
    if actor:
        qs = qs.filter(actor__icontains=actor) if ":" not in actor else qs.filter(actor=actor)
    if change_type:
        qs = qs.filter(change_type=change_type)
    # Only what the log shows: never the full before/after snapshots of a long page.
    qs = qs.only("id", "memory_id", "version", "actor", "change_type", "reason", "created_at")
    page = page_of(qs, field_name="id", desc=True, cursor=cursor, size=size)
    _label_memories(tenant, page.items)  # the memory's key or text, not only its id
    return page


# --- dashboard -------------------------------------------------------------------------------


def _label_memories(tenant: Tenant, revisions: list[MemoryRevision]) -> None:
    """`memory_label` on each revision: the start of its memory's text as it is now, else its
    key (one query for the whole list; a purged memory keeps neither, one gone for good only
    its id: then "")."""
    ids = {r.memory_id for r in revisions}
    rows = tenant_memories(tenant).filter(pk__in=ids).values_list("id", "key", Left("text", 100))
    labels = {pk: text or key for pk, key, text in rows}
    for revision in revisions:
        revision.memory_label = labels.get(revision.memory_id) or ""


def dashboard_stats(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    now = resolve_now(now)
    live = tenant_memories(tenant).live(now)
    rows = (
        live.values("agent__slug", "scope", "category")
        .annotate(n=Count("id"))
        .order_by("agent__slug", "scope", "category")
    )
    categories: list[str] = sorted({r["category"] for r in rows})
    matrix: dict[str, dict[str, int]] = {}
    by_category: dict[str, int] = dict.fromkeys(categories, 0)
    for r in rows:
        owner = r["agent__slug"] or ("user" if r["scope"] == Scope.USER else "workspace")
        matrix.setdefault(owner, {})[r["category"]] = r["n"] + matrix.get(owner, {}).get(
            r["category"], 0
        )
        by_category[r["category"]] += r["n"]
    table = [
        {
            "agent": agent,
            "counts": [counts.get(c, 0) for c in categories],
            "total": sum(counts.values()),
        }
        for agent, counts in matrix.items()
    ]
    totals = live.aggregate(
        pending=Count("id", filter=Q(review_state=ReviewState.PENDING)),
        expiring=Count("id", filter=Q(expires_at__lte=now + timedelta(hours=24))),
        total=Count("id"),
    )
    recent = list(MemoryRevision.objects.for_tenant(tenant).order_by("-created_at", "-id")[:10])
    _label_memories(tenant, recent)
    # Only runs this tenant may see (its own `Run now`s and the global ones), each showing the
    # tenant's counts: never another tenant's run or its numbers (as on the Jobs page).
    last_prune = (
        JobRun.objects.visible_to(tenant)
        .filter(job="prune_memories")
        .order_by("-started_at", "-id")
        .first()
    )
    if last_prune is not None:
        last_prune.shown_counts = last_prune.counts_for(tenant)
    return {
        "categories": categories,
        "by_category": by_category,
        "table": table,
        "pending": totals["pending"],
        "expiring": totals["expiring"],
        "total": totals["total"],
        "recent": recent,
        "last_prune": last_prune,
    }


# --- conversations ---------------------------------------------------------------------------

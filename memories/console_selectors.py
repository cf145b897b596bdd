"""Console reads: operators see every memory of their tenant, whatever its status.

Every queryset starts from `Memory.objects.for_tenant(tenant)`. Lists are keyset-paginated
(`(sort value, id)` cursors) and run a fixed number of queries whatever the page size.
"""

from __future__ import annotations

import base64
import json
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Count, Q, QuerySet
from django.db.models.functions import Coalesce, Left
from django.http import Http404

from accounts.models import Agent, Tenant
from memories.clock import resolve_now
from memories.models import JobRun, Memory, MemoryRevision, ReviewState, Status

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


# --- cursors ---------------------------------------------------------------------------------


def encode_cursor(value: Any, pk: Any) -> str:
    if isinstance(value, datetime):
        value = {"t": value.isoformat()}
    raw = json.dumps([value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[Any, Any] | None:
    """`(value, pk)` from a cursor, or None for a malformed one (which restarts the list)."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json.loads(raw)
        if isinstance(value, dict):
            value = datetime.fromisoformat(value["t"])
        return value, pk
    except (ValueError, TypeError, KeyError, RecursionError):  # RecursionError: forged, too deep
        return None


def _keyset(qs: QuerySet, *, field_name: str, desc: bool, cursor: str | None, size: int) -> Page:
    order = [f"-{field_name}", "-id"] if desc else [field_name, "id"]
    qs = qs.order_by(*order)
    decoded = decode_cursor(cursor) if cursor else None
    if decoded is not None:
        value, pk = decoded
        op = "lt" if desc else "gt"
        # A hand-edited cursor of the wrong type restarts the list rather than failing.
        with suppress(ValueError, TypeError, ValidationError):
            qs = qs.filter(
                Q(**{f"{field_name}__{op}": value}) | Q(**{field_name: value, f"id__{op}": pk})
            )
    rows = list(qs[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = encode_cursor(getattr(last, field_name), last.pk)
    return Page(items=rows, next_cursor=next_cursor)


# --- memories --------------------------------------------------------------------------------


def tenant_memories(tenant: Tenant) -> QuerySet:
    return Memory.objects.for_tenant(tenant)


def memory_for_console(*, tenant: Tenant, memory_id: str) -> Memory:
    """One memory of the tenant (any status); another tenant's id is a 404 like a missing one."""
    memory = tenant_memories(tenant).select_related("agent").filter(pk=memory_id).first()
    if memory is None:
        raise Http404("No such memory")
    return memory


def agents_for(tenant: Tenant) -> list[Agent]:
    return list(Agent.objects.filter(tenant=tenant).order_by("slug"))


def _filtered(tenant: Tenant, filters: dict[str, str], now: datetime) -> QuerySet:
    qs = tenant_memories(tenant).select_related("agent")
    agent = filters.get("agent")
    if agent == "workspace":
        qs = qs.filter(agent__isnull=True)
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
    page = _keyset(qs, field_name=field_name, desc=desc, cursor=cursor, size=size)
    page.total = bounded_count(qs)
    return page


def text_search(qs: QuerySet, query: str, *, limit: int) -> list[Memory]:
    """The API's hybrid search (`memories.search.ranked_ids`) over the console's own scope.

    Operators search every memory of the filtered queryset (any agent, any status), so this
    cannot go through the agent-facing `memory_search`, which applies one agent's visibility;
    it calls the same one-statement ranking with the console's tenant-scoped queryset instead.
    """
    from memories.embeddings import get_embedder
    from memories.search import ranked_ids

    vector = get_embedder().embed([query])[0]
    ranked = ranked_ids(
        qs.select_related(None), query=query, vector=vector, mode="hybrid", limit=limit
    )
    ids = [pk for pk, _ in ranked]
    by_id = {m.pk: m for m in qs.filter(pk__in=ids)}
    return [by_id[pk] for pk in ids if pk in by_id]


def near_duplicates(
    *, tenant: Tenant, memory_ids: list[str], min_similarity: float = 0.8, per_memory: int = 3
) -> dict[str, list[dict]]:
    """Live neighbours of each memory by cosine similarity, in ONE query (a LATERAL join)."""
    if not memory_ids:
        return {}
    table = Memory._meta.db_table
    sql = f"""
        SELECT p.id, n.id, n.text, n.version, 1 - (n.embedding <=> p.embedding) AS similarity
        FROM {table} p
        CROSS JOIN LATERAL (
            SELECT m.id, m.text, m.version, m.embedding FROM {table} m
            WHERE m.tenant_id = p.tenant_id AND m.status = 'active' AND m.id <> p.id
              AND m.embedding IS NOT NULL
            ORDER BY m.embedding <=> p.embedding
            LIMIT %s
        ) n
        WHERE p.tenant_id = %s AND p.id = ANY(%s) AND p.embedding IS NOT NULL
          AND 1 - (n.embedding <=> p.embedding) >= %s
        ORDER BY p.id, similarity DESC
    """  # noqa: S608 - table name is ours, values are parameters
    out: dict[str, list[dict]] = {pk: [] for pk in memory_ids}
    with transaction.atomic(), connection.cursor() as cursor:
        # The HNSW scan visits a bounded candidate list; rows of other tenants (or dead ones)
        # can fill it. Iterative scans keep walking the graph until the filters pass enough.
        cursor.execute("SET LOCAL hnsw.iterative_scan = strict_order")
        cursor.execute(sql, [per_memory, tenant.pk, list(memory_ids), min_similarity])
        for pid, nid, text, version, similarity in cursor.fetchall():
            out[pid].append(
                {
                    "memory_id": nid,
                    "text": text,
                    "version": version,
                    "similarity": round(similarity, 3),
                }
            )
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
    page = _keyset(qs, field_name="created_at", desc=False, cursor=cursor, size=size)
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
    return _keyset(qs, field_name="forgotten_at", desc=True, cursor=cursor, size=size)


def revisions_for(*, tenant: Tenant, memory: Memory) -> list[MemoryRevision]:
    return list(
        MemoryRevision.objects.filter(tenant=tenant, memory_id=memory.pk).order_by("-id")[:200]
    )


def activity_page(
    *,
    tenant: Tenant,
    actor: str = "",
    change_type: str = "",
    cursor: str | None = None,
    size: int = PAGE_SIZE,
) -> Page:
    qs = MemoryRevision.objects.filter(tenant=tenant)
    if actor:
        qs = qs.filter(actor__icontains=actor) if ":" not in actor else qs.filter(actor=actor)
    if change_type:
        qs = qs.filter(change_type=change_type)
    # Only what the log shows: never the full before/after snapshots of a long page.
    qs = qs.only("id", "memory_id", "version", "actor", "change_type", "reason", "created_at")
    return _keyset(qs, field_name="id", desc=True, cursor=cursor, size=size)


# --- dashboard -------------------------------------------------------------------------------


def _label_memories(tenant: Tenant, revisions: list[MemoryRevision]) -> None:
    """`memory_label` on each revision: its memory's key, else the start of its text (one
    query for the whole list; a memory gone for good keeps only its id)."""
    ids = {r.memory_id for r in revisions}
    rows = tenant_memories(tenant).filter(pk__in=ids).values_list("id", "key", Left("text", 80))
    labels = {pk: key or text for pk, key, text in rows}
    for revision in revisions:
        revision.memory_label = labels.get(revision.memory_id) or ""


def dashboard_stats(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    now = resolve_now(now)
    live = tenant_memories(tenant).live(now)
    rows = (
        live.values("agent__slug", "category")
        .annotate(n=Count("id"))
        .order_by("agent__slug", "category")
    )
    categories: list[str] = sorted({r["category"] for r in rows})
    matrix: dict[str, dict[str, int]] = {}
    for r in rows:
        matrix.setdefault(r["agent__slug"] or "workspace", {})[r["category"]] = r["n"]
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
    recent = list(MemoryRevision.objects.filter(tenant=tenant).order_by("-created_at", "-id")[:10])
    _label_memories(tenant, recent)
    # Only runs this tenant may see (its own `Run now`s and the global ones), each showing the
    # tenant's counts: never another tenant's run or its numbers (SPEC §6, as on the Jobs page).
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
        "table": table,
        "pending": totals["pending"],
        "expiring": totals["expiring"],
        "total": totals["total"],
        "recent": recent,
        "last_prune": last_prune,
    }

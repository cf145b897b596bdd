"""Agent-facing reads shared by the REST API and MCP: get, recall, list and keys.

Every read starts from `memories.visibility.visible_memories` (tenant first, live only, the
agent's own + workspace + shared, and the subject rule), so an expired memory is invisible the
moment it expires and another subject's memory never shows up.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from django.db.models import (
    Case,
    F,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    TextField,
    Value,
    When,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Coalesce

from accounts.models import Agent
from accounts.principal import Principal
from memories import validation
from memories.access import bump_access
from memories.clock import resolve_now
from memories.compiled import CompiledQuery, Slot, principal_values, slot_principal
from memories.cursors import WalkCursor
from memories.ids import is_memory_id
from memories.models import VECTOR_FIELDS, Memory, MemoryQuerySet, MemoryRevision, Status
from memories.serialization import memory_json_sql
from memories.visibility import (
    reads_from_ids,
    visible_memories,
    visible_memories_by_owner,
    visible_q,
)
from memoryhub.errors import InvalidInput, NotFound

LIST_FILTERS = frozenset(
    {
        "category",
        "kind",
        "tag",
        "tags",
        "subject_id",
        "thread_id",
        "updated_after",
        "include_shared",
        "limit",
        "cursor",
        "key_prefix",
    }
)


def _touch(memory: Memory, now: datetime) -> None:
    """A read bumps `last_accessed_at` and `access_count` (not a change: no version, no
    revision); cold memories are the ones evicted first at the cap. Recorded through
    `memories.access` like search and hydrate, so a read never waits for an index-touching
    UPDATE."""
    bump_access(memory.tenant_id, [memory.pk], now)


def _by_id(*, tenant, agent, subject, now, target) -> MemoryQuerySet:
    """The visible memory with id `target` (a one-row queryset, ordered as `.first()` is)."""
    return (
        visible_memories(tenant=tenant, agent=agent, subject_id=subject, now=now)
        .select_related("agent")
        .defer(*VECTOR_FIELDS)
        .filter(pk=target)
        .order_by("pk")[:1]
    )


def _by_key(*, tenant, agent, subject, now, target) -> MemoryQuerySet:
    """The visible memory under key `target` that wins: the agent's own over the workspace's
    over a shared one, the subject's own over a subject-less one, then the newest."""
    return (
        visible_memories(tenant=tenant, agent=agent, subject_id=subject, now=now)
        .select_related("agent")
        .defer(*VECTOR_FIELDS)
        .filter(key=target)
        .order_by(
            Case(
                When(agent_id=agent.pk, then=Value(0)),
                When(agent_id__isnull=True, then=Value(1)),
                default=Value(2),
                output_field=IntegerField(),
            ),
            Case(
                When(subject_id__isnull=False, then=Value(0)),
                default=Value(1),
                output_field=IntegerField(),
            ),
            "-updated_at",
        )[:1]
    )


@lru_cache(maxsize=256)
def _compiled_read(build: Callable[..., MemoryQuerySet], with_subject: bool, shared: int):
    """`build`'s statement for one shape (a subject or not, how many agents shared), compiled
    once per process: the ORM's query compilation cost more than the query."""
    slots = Slot()
    principal = slot_principal(slots, shared=shared)
    queryset = build(
        tenant=principal.tenant.pk,
        agent=principal.agent,
        subject=slots.text("subject") if with_subject else None,
        now=slots.time("now"),
        target=slots.text("target"),
    )
    return CompiledQuery(queryset, slots, inline=True)


def _read_one(
    build: Callable[..., MemoryQuerySet],
    *,
    principal: Principal,
    subject: str | None,
    now: datetime,
    target: str,
) -> Memory | None:
    """`build(...)`'s one row for this principal and subject, through its compiled statement."""
    shared = reads_from_ids(principal.agent)
    statement = _compiled_read(build, bool(subject), len(shared))
    rows = statement.fetch(
        **principal_values(principal, shared), subject=subject, now=now, target=target
    )
    return rows[0] if rows else None


def memory_get(
    *,
    principal: Principal,
    memory_id: str,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> Memory:
    """One memory by id, or NOT_FOUND (same answer when it exists but is not visible)."""
    principal.require_scope("read")
    now = resolve_now(now)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    memory = None
    if is_memory_id(memory_id):
        memory = _read_one(_by_id, principal=principal, subject=subject, now=now, target=memory_id)
    if memory is None:
        raise NotFound()
    _touch(memory, now)
    return memory


def memory_recall(
    *,
    principal: Principal,
    key: str,
    subject_id: str | None = None,
    now: datetime | None = None,
) -> Memory | None:
    """The live memory under `key`, or None. Several owners may use one key: the agent's own
    wins over the workspace's over a shared one, and the subject's own over a subject-less one.
    """
    principal.require_scope("read")
    now = resolve_now(now)
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    key = validation.memory_key(key)
    if key is None:
        raise InvalidInput("'key' is required", field="key")
    memory = _read_one(_by_key, principal=principal, subject=subject, now=now, target=key)
    if memory is not None:
        _touch(memory, now)
    return memory


def memory_keys(
    *,
    principal: Principal,
    subject_id: str | None = None,
    category: str | None = None,
    key_prefix: str | None = None,
    now: datetime | None = None,
) -> list[str]:
    """The distinct keys of the live memories this key can see, sorted; optionally only those
    of one category, or only those starting with `key_prefix`."""
    principal.require_scope("read")
    subject = principal.resolve_subject(validation.identifier(subject_id, "subject_id"))
    rows = visible_memories(
        tenant=principal.tenant, agent=principal.agent, subject_id=subject, now=now
    ).filter(key__isnull=False)
    if category:
        rows = rows.filter(category=validation.category(category, default=""))
    rows = _with_key_prefix(rows, key_prefix)
    return list(rows.order_by("key").values_list("key", flat=True).distinct())


def _with_key_prefix(rows: MemoryQuerySet, raw: Any) -> MemoryQuerySet:
    """Only keys starting with the prefix: `startswith` escapes LIKE's wildcards (`%`, `_`,
    `\\`), so a prefix matches literally (a namespace such as `lg/user_1/` is no pattern)."""
    prefix = validation.key_prefix(raw)
    return rows.filter(key__startswith=prefix) if prefix else rows


def memory_export(
    *,
    principal: Principal,
    subject_id: str | None,
    category: str | None = None,
    include_tombstoned: bool = False,
    include_shared: bool = True,
    now: datetime | None = None,
) -> MemoryQuerySet:
    """What `GET /api/v1/export.md` writes: the memories the key's agent can see for the
    (already resolved) subject, live ones and, when asked, tombstoned ones too."""
    principal.require_scope("read")
    visible = Memory.objects.for_tenant(principal.tenant).filter(
        visible_q(agent=principal.agent, subject_id=subject_id, include_shared=include_shared)
    )
    rows = visible.live(resolve_now(now))
    if include_tombstoned:
        rows = rows | visible.filter(status=Status.TOMBSTONED)
    if category:
        rows = rows.filter(category=category)
    return rows


# --- list with a keyset cursor ---------------------------------------------------------------


def _page(
    rows, parts, *, cursor: WalkCursor, limit: int, as_json_for: Agent | None = None
) -> tuple[list, WalkCursor | None]:
    """One page of the walk, in the order the rows had when the walk began: memories, or with
    `as_json_for` rows of (id, walk_at, json), `json` being the memory object that agent sees.

    Rows unchanged since `as_of` are read straight off the (updated_at, id) index. The few
    changed since then are placed where they stood at `as_of`: their `updated_at` of that time
    is the time of their last revision up to `as_of` (every change writes one, stamped like
    `updated_at`). So a walk returns every memory that existed when it began and is still
    visible exactly once, even when memories change between pages; memories created after it
    began are not part of it (fetch them with `updated_after`).
    """

    def read(rows):
        if as_json_for is None:
            return rows.select_related("agent").defer(*VECTOR_FIELDS)
        json = RawSQL(_LIST_JSON_SQL, [as_json_for.pk], output_field=TextField())
        return rows.annotate(json=json).values_list("id", "walk_at", "json", named=True)

    # Unchanged rows owner by owner (`parts`, together exactly `rows`): each owner's walks its
    # newest-first index and stops after a page, where the OR of owners sorted them all.
    steady = [
        row
        for part in parts
        for row in read(
            part.filter(created_at__lte=cursor.as_of, updated_at__lte=cursor.as_of)
            .filter(cursor.before("updated_at"))
            .annotate(walk_at=F("updated_at"))
            .order_by("-updated_at", "-id")
        )[: limit + 1]
    ]
    rows = rows.filter(created_at__lte=cursor.as_of)
    as_of_then = (
        MemoryRevision.objects.filter(
            tenant_id=OuterRef("tenant_id"), memory_id=OuterRef("pk"), created_at__lte=cursor.as_of
        )
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    moved = list(
        read(
            rows.filter(updated_at__gt=cursor.as_of)
            .annotate(walk_at=Coalesce(Subquery(as_of_then), F("created_at")))
            .filter(cursor.before("walk_at"))
            .order_by("-walk_at", "-id")
        )[: limit + 1]
    )
    merged = sorted(steady + moved, key=lambda m: (m.walk_at, m.id), reverse=True)
    page = merged[:limit]
    if len(merged) <= limit:
        return page, None
    last = page[-1]
    return page, WalkCursor(as_of=cursor.as_of, updated_at=last.walk_at, memory_id=last.id)


def _many(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise InvalidInput("'tag' must be a string or a list of strings", field="tag")


def memory_list(
    *,
    principal: Principal,
    filters: dict,
    now: datetime | None = None,
) -> tuple[list[Memory], str | None]:
    """A page of visible memories, newest `updated_at` first, and the cursor of the next page.

    Filters (all optional): category, kind, tag (repeatable, AND), subject_id, thread_id,
    key_prefix, updated_after, include_shared (default true), limit (default 50, max 200),
    cursor. A walk keeps the order of the moment it began (see `_page`): no memory is skipped
    or repeated when memories change, appear or disappear between pages.
    """
    rows, parts, cursor, limit = _list_rows(principal=principal, filters=filters, now=now)
    page, next_cursor = _page(rows, parts, cursor=cursor, limit=limit)
    return page, next_cursor.encode() if next_cursor else None


def memory_list_json(
    *,
    principal: Principal,
    filters: dict,
    now: datetime | None = None,
) -> tuple[list[str], str | None]:
    """`memory_list` with each memory as the JSON text of `memory_json(memory, agent=<the
    principal's agent>)`, written by PostgreSQL (`memory_json_sql`): a page of 50 costs a
    fraction of decoding 50 rows into models and encoding them again in Python."""
    rows, parts, cursor, limit = _list_rows(principal=principal, filters=filters, now=now)
    page, next_cursor = _page(rows, parts, cursor=cursor, limit=limit, as_json_for=principal.agent)
    return [row.json for row in page], next_cursor.encode() if next_cursor else None


# The owner's slug without a join: the list's querysets select from the memory table alone.
_LIST_JSON_SQL = memory_json_sql(
    f'"{Memory._meta.db_table}"',
    owner_slug=(
        f"(SELECT o.slug FROM {Agent._meta.db_table} o "
        f'WHERE o.id = "{Memory._meta.db_table}".agent_id)'
    ),
)


def _list_rows(
    *, principal: Principal, filters: dict, now: datetime | None
) -> tuple[MemoryQuerySet, list[MemoryQuerySet], WalkCursor, int]:
    """`memory_list`'s filtered visible memories (whole, and split by owner as
    `visible_memories_by_owner` splits them), the walk's cursor and the page size."""
    principal.require_scope("read")
    now = resolve_now(now)
    if not isinstance(filters, dict):
        raise InvalidInput("Filters must be an object", field="filters")
    validation.reject_nul(filters)
    validation.reject_unknown(filters, LIST_FILTERS)
    subject = principal.resolve_subject(
        validation.identifier(filters.get("subject_id"), "subject_id")
    )
    include_shared = validation.parse_bool(
        filters.get("include_shared"), "include_shared", default=True
    )
    limit = validation.parse_limit(filters.get("limit"))
    narrowing: list[Q] = []
    if filters.get("category"):
        narrowing.append(Q(category=validation.category(filters["category"], default="")))
    if filters.get("kind"):
        narrowing.append(Q(kind=validation.kind(filters["kind"])))
    wanted_tags = _many(filters.get("tag")) + _many(filters.get("tags"))
    if len(wanted_tags) > validation.MAX_TAGS:  # each is a filter: bound the query's size
        raise InvalidInput(f"At most {validation.MAX_TAGS} tags", field="tag")
    for tag in wanted_tags:
        narrowing.append(Q(tags__contains=[validation.normalise_tag(tag)]))
    thread_id = validation.identifier(filters.get("thread_id"), "thread_id")
    if thread_id:
        narrowing.append(Q(thread_id=thread_id))
    prefix = filters.get("key_prefix")
    if filters.get("updated_after"):
        after = validation.parse_timestamp(filters["updated_after"], "updated_after")
        narrowing.append(Q(updated_at__gt=after))

    def narrow(rows: MemoryQuerySet) -> MemoryQuerySet:
        for condition in narrowing:
            rows = rows.filter(condition)
        return _with_key_prefix(rows, prefix)

    scope = {
        "tenant": principal.tenant,
        "agent": principal.agent,
        "subject_id": subject,
        "include_shared": include_shared,
        "now": now,
    }
    cursor = (
        WalkCursor.decode(str(filters["cursor"]))
        if filters.get("cursor")
        else WalkCursor(as_of=now)
    )
    rows = narrow(visible_memories(**scope))
    return rows, [narrow(part) for part in visible_memories_by_owner(**scope)], cursor, limit

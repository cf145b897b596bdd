"""Agent-facing reads shared by the REST API and MCP: get, recall, list and keys.

Every read starts from `memories.visibility.visible_memories` (tenant first, live only, the
agent's own + workspace + shared, and the subject rule), so an expired memory is invisible the
moment it expires and another subject's memory never shows up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

from django.db import connection
from django.db.models import (
    Case,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
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
from memories.compiled import CompiledQuery, CompiledSQL, Slot, principal_values, slot_principal
from memories.cursors import WalkCursor
from memories.horizon import list_horizon
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
    key: str | None,
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
    keys = rows.order_by("key").values_list("key", flat=True).distinct()
    return cast(list[str], list(keys))  # key__isnull=False above


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


def _walk(
    rows, parts, *, cursor: WalkCursor, limit: int, as_json_for: Agent | None = None
) -> list[QuerySet]:
    """The statements of one page of the walk, in the order the rows had when the walk began:
    one per owner (`parts`) for the rows unchanged since `as_of`, and one for the rows changed
    since; `_merged` makes the page of their rows. With `as_json_for`, rows of (id, walk_at,
    json), `json` being the memory object that agent sees; else memories.

    Rows unchanged since `as_of` are read straight off the (updated_at, id) index. The few
    changed since then are placed where they stood at `as_of`: their `updated_at` of that time
    is the time of their last revision up to `as_of` (every change writes one, stamped like
    `updated_at`). So a walk returns every memory that existed at `as_of` and is still
    visible exactly once, even when memories change between pages; memories created after
    `as_of` are not part of it (fetch them with `updated_after=<as_of>`). `as_of` is the
    walk's horizon (`memories.horizon`): no write still in flight lands at or before it.
    """

    def read(rows):
        if as_json_for is None:
            return rows.select_related("agent").defer(*VECTOR_FIELDS)
        json = RawSQL(_LIST_JSON_SQL, [as_json_for.pk], output_field=TextField())
        return rows.annotate(json=json).values_list("id", "walk_at", "json")

    # Unchanged rows owner by owner (`parts`, together exactly `rows`): each owner's walks its
    # newest-first index and stops after a page, where the OR of owners sorted them all.
    steady = [
        read(
            part.filter(created_at__lte=cursor.as_of, updated_at__lte=cursor.as_of)
            .filter(cursor.before("updated_at"))
            .annotate(walk_at=F("updated_at"))
            .order_by("-updated_at", "-id")
        )[: limit + 1]
        for part in parts
    ]
    rows = rows.filter(created_at__lte=cursor.as_of)
    as_of_then = (
        MemoryRevision.objects.filter(
            tenant_id=OuterRef("tenant_id"), memory_id=OuterRef("pk"), created_at__lte=cursor.as_of
        )
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    moved = read(
        rows.filter(updated_at__gt=cursor.as_of)
        .annotate(walk_at=Coalesce(Subquery(as_of_then), F("created_at")))
        .filter(cursor.before("walk_at"))
        .order_by("-walk_at", "-id")
    )[: limit + 1]
    return [*steady, moved]


def _merged(
    results: list[list], *, cursor: WalkCursor, limit: int, key: Callable[[Any], tuple]
) -> tuple[list, WalkCursor | None]:
    """The page `_walk`'s statements returned (`key`: a row's (walk_at, id)), and the cursor of
    the next one (None on the last). A row that moved on between two of the statements (its
    change committed in between) comes from both at its one place in the walk: kept once."""
    unique = {key(row): row for rows in results for row in rows}
    merged = sorted(unique.values(), key=key, reverse=True)
    page = merged[:limit]
    if len(merged) <= limit:
        return page, None
    walk_at, memory_id = key(page[-1])
    return page, WalkCursor(as_of=cursor.as_of, updated_at=walk_at, memory_id=memory_id)


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
) -> tuple[list[Memory], str | None, datetime]:
    """A page of visible memories, newest `updated_at` first, the cursor of the next page, and
    the walk's `as_of`.

    Filters (all optional): category, kind, tag (repeatable, AND), subject_id, thread_id,
    key_prefix, updated_after, include_shared (default true), limit (default 50, max 200),
    cursor. A walk keeps the order of its `as_of` (see `_walk`): no memory is skipped or
    repeated when memories change, appear or disappear between pages. `as_of` is the walk's
    horizon (`memories.horizon`): every write stamped at or before it is in the walk, so the
    next sync asks `updated_after=<as_of>` and misses nothing.
    """
    request = _list_request(principal=principal, filters=filters, now=now)
    page, next_cursor = _merged(
        _walk_built(principal, request),
        cursor=request.cursor,
        limit=request.limit,
        key=lambda memory: (memory.walk_at, memory.id),
    )
    return page, next_cursor.encode() if next_cursor else None, request.cursor.as_of


def memory_list_json(
    *,
    principal: Principal,
    filters: dict,
    now: datetime | None = None,
) -> tuple[list[str], str | None, datetime]:
    """`memory_list` with each memory as the JSON text of `memory_json(memory, agent=<the
    principal's agent>)`, written by PostgreSQL (`memory_json_sql`): a page of 50 costs a
    fraction of decoding 50 rows into models and encoding them again in Python. Without tags or
    a key prefix, the walk's statements are compiled once per shape (`_compiled_list`)."""
    request = _list_request(principal=principal, filters=filters, now=now)
    shared = reads_from_ids(principal.agent) if request.include_shared else []
    shape = request.shape(len(shared))
    if shape is None:
        results = _walk_built(principal, request, as_json_for=principal.agent)
    else:
        values = {**principal_values(principal, shared), **request.slot_values()}
        with connection.cursor() as db:
            results = []
            for statement in _compiled_list(shape):
                db.execute(*statement.bind(**values))
                results.append(db.fetchall())
    page, next_cursor = _merged(
        results, cursor=request.cursor, limit=request.limit, key=lambda row: (row[1], row[0])
    )
    as_of = request.cursor.as_of
    return [row[2] for row in page], next_cursor.encode() if next_cursor else None, as_of


def _walk_built(
    principal: Principal, request: _ListRequest, *, as_json_for: Agent | None = None
) -> list[list]:
    """The rows of `_walk`'s statements, built from the request's querysets."""
    rows, parts = _list_rows(principal.tenant, principal.agent, request)
    statements = _walk(
        rows, parts, cursor=request.cursor, limit=request.limit, as_json_for=as_json_for
    )
    return [list(statement) for statement in statements]


# The owner's slug without a join: the list's querysets select from the memory table alone.
_LIST_JSON_SQL = memory_json_sql(
    f'"{Memory._meta.db_table}"',
    owner_slug=(
        f"(SELECT o.slug FROM {Agent._meta.db_table} o "
        f'WHERE o.id = "{Memory._meta.db_table}".agent_id)'
    ),
)


@dataclass(frozen=True)
class _ListRequest:
    """A list request's validated filters."""

    now: datetime
    cursor: WalkCursor
    limit: int
    subject: str | None
    include_shared: bool
    category: str | None
    kind: str | None
    tags: tuple[str, ...]
    thread_id: str | None
    key_prefix: str | None
    updated_after: datetime | None

    # The filters a compiled list statement takes as slots when they are given.
    OPTIONAL = ("subject", "category", "kind", "thread_id", "updated_after")

    def shape(self, shared: int) -> tuple | None:
        """What its compiled statements depend on besides the slots' values; None for filters
        the ORM rewrites on their way to SQL (tags as arrays, a key prefix as a LIKE pattern)."""
        if self.tags or self.key_prefix:
            return None
        given = tuple(getattr(self, name) is not None for name in self.OPTIONAL)
        return (shared, self.include_shared, self.limit, self.cursor.updated_at is None, given)

    def slot_values(self) -> dict[str, Any]:
        return {
            **{name: getattr(self, name) for name in self.OPTIONAL},
            "now": self.now,
            "as_of": self.cursor.as_of,
            "cursor_at": self.cursor.updated_at,
            "cursor_id": self.cursor.memory_id,
        }


@lru_cache(maxsize=512)
def _compiled_list(shape: tuple) -> list[CompiledSQL]:
    """The walk's statements (`_walk`, as JSON rows) for one shape, compiled once per process:
    building and compiling three querysets cost more than running them."""
    shared, include_shared, limit, first_page, present = shape
    slots = Slot()
    principal = slot_principal(slots, shared=shared)
    given = dict(zip(_ListRequest.OPTIONAL, present, strict=True))

    def slot(name: str, kind: Callable[[str], Any]) -> Any:
        return kind(name) if given[name] else None

    cursor = WalkCursor(as_of=slots.time("as_of"))
    if not first_page:
        cursor = WalkCursor(
            as_of=cursor.as_of,
            updated_at=slots.time("cursor_at"),
            memory_id=slots.text("cursor_id"),
        )
    request = _ListRequest(
        now=slots.time("now"),
        cursor=cursor,
        limit=limit,
        subject=slot("subject", slots.text),
        include_shared=include_shared,
        category=slot("category", slots.text),
        kind=slot("kind", slots.text),
        tags=(),
        thread_id=slot("thread_id", slots.text),
        key_prefix=None,
        updated_after=slot("updated_after", slots.time),
    )
    rows, parts = _list_rows(principal.tenant, principal.agent, request)
    statements = _walk(rows, parts, cursor=cursor, limit=limit, as_json_for=principal.agent)
    # Each statement needs only some of the slots (the agent's own part, no shared agent's id);
    # together they must carry them all, or a value changed on its way to SQL.
    every = frozenset(slots.names.values())
    compiled = [
        CompiledSQL(*statement.query.sql_with_params(), slots, optional=every)
        for statement in statements
    ]
    missing = every - {name for statement in compiled for _, name in statement.positions}
    if missing:
        raise ValueError(f"placeholders not found in the compiled list statements: {missing}")
    return compiled


def _list_request(*, principal: Principal, filters: dict, now: datetime | None) -> _ListRequest:
    """`memory_list`'s filters, validated."""
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
    category = kind = updated_after = None
    if filters.get("category"):
        category = validation.category(filters["category"], default="")
    if filters.get("kind"):
        kind = validation.kind(filters["kind"])
    wanted_tags = _many(filters.get("tag")) + _many(filters.get("tags"))
    if len(wanted_tags) > validation.MAX_TAGS:  # each is a filter: bound the query's size
        raise InvalidInput(f"At most {validation.MAX_TAGS} tags", field="tag")
    tags = tuple(validation.normalise_tag(tag) for tag in wanted_tags)
    thread_id = validation.identifier(filters.get("thread_id"), "thread_id") or None
    if filters.get("updated_after"):
        updated_after = validation.parse_timestamp(filters["updated_after"], "updated_after")
    # A walk's first page reads the horizon (after `now`, before its own statements); the
    # next pages carry it in their cursor.
    cursor = (
        WalkCursor.decode(str(filters["cursor"]))
        if filters.get("cursor")
        else WalkCursor(as_of=list_horizon(now))
    )
    return _ListRequest(
        now=now,
        cursor=cursor,
        limit=limit,
        subject=subject or None,
        include_shared=include_shared,
        category=category,
        kind=kind,
        tags=tags,
        thread_id=thread_id,
        key_prefix=validation.key_prefix(filters.get("key_prefix")) or None,
        updated_after=updated_after,
    )


def _list_rows(
    tenant, agent: Agent, request: _ListRequest
) -> tuple[MemoryQuerySet, list[MemoryQuerySet]]:
    """The request's filtered visible memories, whole and split by owner as
    `visible_memories_by_owner` splits them."""
    narrowing: list[Q] = []
    if request.category is not None:
        narrowing.append(Q(category=request.category))
    if request.kind is not None:
        narrowing.append(Q(kind=request.kind))
    for tag in request.tags:
        narrowing.append(Q(tags__contains=[tag]))
    if request.thread_id is not None:
        narrowing.append(Q(thread_id=request.thread_id))
    if request.updated_after is not None:
        narrowing.append(Q(updated_at__gt=request.updated_after))

    def narrow(rows: MemoryQuerySet) -> MemoryQuerySet:
        for condition in narrowing:
            rows = rows.filter(condition)
        return _with_key_prefix(rows, request.key_prefix)

    scope = {
        "tenant": tenant,
        "agent": agent,
        "subject_id": request.subject,
        "include_shared": request.include_shared,
        "now": request.now,
    }
    rows = narrow(visible_memories(**scope))
    return rows, [narrow(part) for part in visible_memories_by_owner(**scope)]

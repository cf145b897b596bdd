"""Hydrate (docs/api.md): what an agent loads at the start of a run, within a byte budget.

The two core blocks first — the subject's user-scoped `core` memories (`include_user_core`),
then the agent's own (and its shared agents') `core` memories (`include_agent_core`) — each
newest first and bounded by the agent's `core_max_entries` and `core_max_chars`; then the newest
others fill what the budget leaves. With `archival_mode=auto` and a query, the best archival
matches come in their own list (`archival`), outside the budget, bounded by `archival_limit`,
`archival_min_score` and the agent's `archival_max_chars`. The candidates are walked newest
first by (id, size, characters) only, and the chosen memories are written as JSON by PostgreSQL
in one statement (`memory_json_sql`).

A memory's characters are those of its text and of its data as JSON text: what a model reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, cast

import orjson
from django.db import connection
from django.db.models import IntegerField, Q, QuerySet, TextField, Value
from django.db.models.functions import Cast, Coalesce, Length

from accounts.models import Agent
from accounts.principal import Principal
from memories.access import bump_access
from memories.clock import resolve_now
from memories.compiled import CompiledSQL, Slot, principal_values, slot_principal
from memories.embeddings import get_embedder
from memories.models import Category, Memory, MemoryQuerySet
from memories.retrieval.formats import hydrate_markdown
from memories.retrieval.params import HydrateParams, SearchParams, parse_hydrate
from memories.retrieval.ranking import sql_with_params
from memories.retrieval.search import ranked_search
from memories.serialization import memory_json_sql
from memories.visibility import OWN, SHARED, USER, reads_from_ids, visible_parts

# Batch sizes of the candidate walk (`_fill`): enough rows for the budget left at a typical size.
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


class _Block:
    """A core block's limits: at most `entries` memories and `chars` characters.
    `over` holds what it left out for its limits (explain: `core_limit`); once `full`, every
    memory of the block not taken was left out for them."""

    def __init__(self, entries: int, chars: int):
        self.entries_left = entries
        self.chars_left = chars
        self.over: set[str] = set()

    @property
    def full(self) -> bool:
        return self.entries_left <= 0

    def admits(self, memory_id: str, chars: int) -> bool:
        if self.full or chars > self.chars_left:
            self.over.add(memory_id)
            return False
        return True

    def take(self, chars: int) -> None:
        self.entries_left -= 1
        self.chars_left -= chars


def _hydrate_pools(
    principal: Principal, params: HydrateParams, now: datetime
) -> tuple[list[MemoryQuerySet], list[MemoryQuerySet], list[MemoryQuerySet]]:
    """The user core block, the agent core block and the recency pool, each as its parts by
    owner (see `_newest`)."""
    parts = visible_parts(
        tenant=principal.tenant,
        agent=principal.agent,
        subject_id=params.subject_id,
        include_shared=True,
        now=now,
    )
    user_core = [
        part.filter(category=Category.CORE)
        for owner, part in parts
        if owner == USER and params.include_user_core
    ]
    agent_core = [
        part.filter(category=Category.CORE)
        for owner, part in parts
        if owner in (OWN, SHARED) and params.include_agent_core
    ]
    recent = [part.exclude(category__in=[Category.CORE, Category.ARCHIVAL]) for _, part in parts]
    if params.thread_id:
        thread_q = ~Q(category=Category.CONVERSATION) | Q(thread_id=params.thread_id)
        recent = [part.filter(thread_q) for part in recent]
    else:
        recent = [part.exclude(category=Category.CONVERSATION) for part in recent]
    return user_core, agent_core, recent


@dataclass(frozen=True)
class _PoolShape:
    """What makes two hydrations' pool statements differ in more than their values."""

    subject: bool
    shared: int
    agent_core: bool
    user_core: bool
    thread: bool


Statement = tuple[str, list[Any]]

PART_COLUMNS = ("id", "size_bytes", "updated_at", "chars")


def _part_rows(part: QuerySet[Memory], *, core: bool) -> QuerySet[Memory, tuple[Any, ...]]:
    """A part's (id, size_bytes, updated_at, chars) rows. Only a core block counts characters
    (its limit): the recency walk reads 0, not every candidate's text and data again."""
    chars = (
        Length("text")
        + Coalesce(Length(Cast("data", TextField())), Value(0), output_field=IntegerField())
        if core
        else Value(0, output_field=IntegerField())
    )
    return part.annotate(chars=chars).values_list(*PART_COLUMNS)


@lru_cache(maxsize=64)
def _compiled_pools(shape: _PoolShape) -> tuple[list[CompiledSQL], ...]:
    """`_hydrate_pools`' parts as (id, size_bytes, updated_at, chars) statements, compiled once
    per shape: the ORM's compiles of four to six parts cost more than the walk itself."""
    slots = Slot()
    principal = slot_principal(slots, shared=shape.shared)
    params = HydrateParams(
        subject_id=slots.text("subject") if shape.subject else None,
        thread_id=slots.text("thread") if shape.thread else None,
        budget_bytes=0,
        query=None,
        archival_mode="off",
        archival_limit=0,
        archival_min_score=0.0,
        include_agent_core=shape.agent_core,
        include_user_core=shape.user_core,
        format="json",
        explain=False,
    )
    pools = _hydrate_pools(principal, params, slots.time("now"))
    # Each part names its own owner only, the thread only the recency pool's parts.
    optional = frozenset(slots.names.values()) - {"tenant", "now"}
    return tuple(
        [
            # Custom plans (no `inline`): how far a part walks depends on the budget left
            # (`size_bytes <= %s`), which only a custom plan sees; a generic plan walked the
            # owner's whole list, far slower (docs/performance.md#code-figures).
            CompiledSQL(
                *sql_with_params(_part_rows(part, core=index < 2)), slots, optional=optional
            )
            for part in pool
        ]
        for index, pool in enumerate(pools)  # the user core block, the agent's, the recency pool
    )


def _pool_statements(
    principal: Principal, params: HydrateParams, now: datetime
) -> tuple[list[Statement], ...]:
    """`_hydrate_pools`' parts as bound (id, size_bytes, updated_at, chars) statements."""
    shared = reads_from_ids(principal.agent)
    shape = _PoolShape(
        subject=bool(params.subject_id),
        shared=len(shared),
        agent_core=params.include_agent_core,
        user_core=params.include_user_core,
        thread=bool(params.thread_id),
    )
    values = {
        **principal_values(principal, shared),
        "subject": params.subject_id,
        "thread": params.thread_id,
        "now": now,
    }
    return tuple([s.bind(**values) for s in pool] for pool in _compiled_pools(shape))


NEWEST = ("-updated_at", "-id")


def _newest(parts: Sequence[QuerySet[Memory]]) -> QuerySet[Memory, tuple[Any, ...]]:
    """(id, size_bytes, updated_at, chars) of the parts' rows, newest first."""
    rows = [_part_rows(part, core=False).order_by(*NEWEST) for part in parts]
    return rows[0] if len(rows) == 1 else rows[0].union(*rows[1:], all=True).order_by(*NEWEST)


class _NewestFirst:
    """A newest-first walk over a pool's parts by owner, in batches of what still fits.

    Each part is compiled once (the ORM's compile costs more than the query itself); a batch
    is each part's index walk newest first, cut at the budget left and the last row seen, and
    PostgreSQL merges the walks (the parts are simple subqueries, pulled up into index scans).
    """

    def __init__(self, parts: list[Statement]):
        self.parts = parts  # each part's (id, size_bytes, updated_at, chars) statement

    def batch(
        self, *, max_size: int, after: tuple[datetime, str] | None, limit: int
    ) -> list[tuple[str, int, datetime, int]]:
        extra: list[Any]
        where, extra = "size_bytes <= %s", [max_size]
        if after is not None:
            where += " AND (updated_at < %s OR (updated_at = %s AND id < %s))"
            extra += [after[0], after[0], after[1]]
        branches, params = [], []
        for sql, part_params in self.parts:
            branches.append(
                f"(SELECT id, size_bytes, updated_at, chars FROM ({sql}) part WHERE {where} "
                "ORDER BY updated_at DESC, id DESC LIMIT %s)"
            )
            params += [*part_params, *extra, limit]
        if len(branches) == 1:  # one owner's walk is in order already
            statement = branches[0][1:-1]
        else:
            statement = " UNION ALL ".join(branches) + " ORDER BY 3 DESC, 1 DESC LIMIT %s"
            params.append(limit)
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cast(list[tuple[str, int, datetime, int]], cursor.fetchall())


def _fill(
    parts: list[Statement],
    budget: _Budget,
    taken: list[tuple[str, str, int]],
    reason: str,
    seen: set[str],
    block: _Block | None = None,
) -> None:
    """Newest first; skip what does not fit (the budget, or a core block's characters); stop
    reading once nothing more can fit, or a core block has its entries.

    Only (id, size, updated_at, chars) is read here, in batches of candidates no larger than
    the budget left, so an agent with 10k memories costs a query or two; the chosen memories
    are written out afterwards by `_entries`, in one statement.
    """
    if not parts:
        return
    walk = _NewestFirst(parts)
    after: tuple[datetime, str] | None = None
    while budget.left > 0 and not (block is not None and block.full):
        # Enough rows for the budget left at a typical memory size; more batches if not.
        size = max(HYDRATE_MIN_BATCH, min(HYDRATE_BATCH, budget.left // TYPICAL_BYTES))
        batch = walk.batch(max_size=budget.left, after=after, limit=size)
        for memory_id, size_bytes, _, chars in batch:
            if memory_id in seen or (block is not None and not block.admits(memory_id, chars)):
                continue
            if budget.take(size_bytes):
                taken.append((memory_id, reason, size_bytes))
                seen.add(memory_id)
                if block is not None:
                    block.take(chars)
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


def _omitted(
    pools: Sequence[tuple[Sequence[QuerySet[Memory]], _Block | None]],
    seen: set[str],
    budget_total: int,
) -> list[dict[str, Any]]:
    """explain: what was visible to a pool and not loaded, and why: left out for its core
    block's limits (`core_limit`), bigger than the whole budget (`too_big`), or past what the
    budget left (`windowed`)."""
    omitted = []
    for parts, block in pools:
        if not parts:
            continue
        for mid, size, _, _ in _newest(parts):
            if mid in seen:
                continue
            if block is not None and (block.full or mid in block.over):
                reason = "core_limit"
            else:
                reason = "too_big" if size > budget_total else "windowed"
            omitted.append({"memory_id": mid, "reason": reason})
            seen.add(mid)
    return omitted


ARCHIVAL_SQL = (
    f"SELECT m.id, char_length(m.text) + COALESCE(char_length(m.data::text), 0), "
    f"{memory_json_sql()} FROM {Memory._meta.db_table} m "
    f"LEFT JOIN {Agent._meta.db_table} o ON o.id = m.agent_id "
    "WHERE m.tenant_id = %s AND m.id = ANY(%s) AND m.status = 'active' "
    "AND (m.expires_at IS NULL OR m.expires_at > %s)"
)


def _archival(
    principal: Principal, params: HydrateParams, now: datetime
) -> list[tuple[str, bytes]]:
    """The `archival` list: the best archival matches of the query above
    `archival_min_score`, at most `archival_limit`, best first, each with its `score`, within
    the agent's `archival_max_chars` (a match that would pass it is skipped; a shorter one after
    it may still fit). Outside the byte budget."""
    if params.archival_mode != "auto" or not params.query or not params.archival_limit:
        return []
    search_params = SearchParams(
        query=params.query,
        limit=params.archival_limit,
        min_score=params.archival_min_score,
        subject_id=params.subject_id,
        categories=[Category.ARCHIVAL],
    )
    embedder = get_embedder()
    matches = ranked_search(
        principal,
        search_params,
        now,
        vector=embedder.embed([params.query])[0],
        model=embedder.model_name,
    )
    if not matches:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            ARCHIVAL_SQL,
            [principal.agent.pk, principal.tenant.pk, [mid for mid, _ in matches], now],
        )
        found = {mid: (chars, json) for mid, chars, json in cursor.fetchall()}
    chars_left = principal.agent.archival_max_chars
    out = []
    for mid, score in matches:
        if mid not in found or found[mid][0] > chars_left:
            continue
        chars, json = found[mid]
        chars_left -= chars
        out.append((mid, f'{json[:-1]},"score":{round(score, 6)!r}}}'.encode()))
    return out


def hydrate_body(
    *, principal: Principal, data: dict[str, Any], now: datetime | None = None
) -> dict[str, Any]:
    """POST /api/v1/hydrate: the context an agent loads at the start of a run.

    The entries are `orjson.Fragment`s (JSON text PostgreSQL wrote): the API renders them as
    they are; `memory_hydrate` gives the same body as plain Python data.
    """
    principal.require_scope("read")
    now = resolve_now(now)
    params = parse_hydrate(principal, data)
    user_core, agent_core, recent = _pool_statements(principal, params, now)
    agent = principal.agent
    blocks = (
        _Block(agent.core_max_entries, agent.core_max_chars),
        _Block(agent.core_max_entries, agent.core_max_chars),
    )
    budget = _Budget(params.budget_bytes)
    taken: list[tuple[str, str, int]] = []
    seen: set[str] = set()
    _fill(user_core, budget, taken, "core", seen, blocks[0])
    _fill(agent_core, budget, taken, "core", seen, blocks[1])
    _fill(recent, budget, taken, "recent", seen)
    entries = _entries(principal, taken, budget, now)
    archival = _archival(principal, params, now)
    body: dict[str, Any] = {
        "ok": True,
        "entries": [orjson.Fragment(entry) for entry in entries],
        "archival": [orjson.Fragment(match) for _, match in archival],
        "bytes_used": budget.used,
        "budget_bytes": budget.total,
    }
    if params.format == "markdown":
        body["markdown"] = hydrate_markdown(
            [orjson.loads(entry) for entry in entries],
            budget.used,
            budget.total,
            archival=[orjson.loads(match) for _, match in archival],
        )
    if params.explain:
        user_pool, agent_pool, recent_pool = _hydrate_pools(principal, params, now)
        body["omitted"] = _omitted(
            [(user_pool, blocks[0]), (agent_pool, blocks[1]), (recent_pool, None)],
            set(seen),
            budget.total,
        )
    bump_access(
        principal.tenant.pk, [mid for mid, _, _ in taken] + [mid for mid, _ in archival], now
    )
    return body


def memory_hydrate(
    *, principal: Principal, data: dict[str, Any], now: datetime | None = None
) -> dict[str, Any]:
    """`hydrate_body` as plain Python data (for MCP, the console and tests)."""
    return cast(
        dict[str, Any],
        orjson.loads(orjson.dumps(hydrate_body(principal=principal, data=data, now=now))),
    )

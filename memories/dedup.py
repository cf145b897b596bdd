"""Near duplicates: the one rule for "this memory says the same thing".

A candidate duplicates a probe when it has the same normalised text (the same `content_hash`:
similarity 1.0) or when their embeddings, from the same model, have a cosine similarity of at
least the threshold. A store asks it of its new text (against the live memories the agent can
see for `near_duplicates`, against its tombstones for `previously_corrected`); the console asks
it of stored memories (the review queue and a memory's detail page).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import QuerySet

from accounts.models import Agent
from memories.compiled import RowLoader
from memories.models import VECTOR_FIELDS, Memory, MemoryVector, vector_literal
from memoryhub import hnsw

NEAR_LIMIT = 5  # duplicates reported per probe, unless the caller asks for fewer

Near = tuple[Memory, float]  # a duplicate and its similarity (0–1, 4 decimals)


@dataclass(frozen=True)
class Probe:
    """What a memory is compared by. `memory_id` names a stored memory, never its own duplicate;
    without an `embedding` only the same text counts."""

    content_hash: str
    embedding: Sequence[float] | str | None
    embedding_model: str
    memory_id: str | None = None


def near_duplicates(
    candidates: QuerySet[Memory],
    probes: Sequence[Probe],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
) -> list[list[Near]]:
    """For each probe, the candidates that duplicate it, best first (the same text first, then
    by similarity; oldest first among equals), at most `limit`."""
    return near_duplicates_in([(candidates, probes)], threshold=threshold, limit=limit)[0]


def near_duplicates_in(
    searches: Sequence[tuple[QuerySet[Memory], Sequence[Probe]]],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
    agents: Sequence[Agent] | None = None,
) -> list[list[list[Near]]]:
    """`near_duplicates` of several candidate sets at once (a store asks of its live look-alikes
    and of its tombstones together): for each set, for each of its probes, the duplicates.

    One statement whatever the number of sets and probes (UNION ALL of two branches per probe),
    each branch index-friendly: the same-text one uses (tenant, content_hash); the vector one is
    a plain `ORDER BY embedding <=> q LIMIT k` over the vectors' table (`MemoryVector`) that its
    HNSW index can serve, with iterative scans
    past filtered-out rows. Its threshold is applied afterwards, so a probe with no near
    duplicate never scans further than k neighbours. The vector branch asks for `2 × limit`:
    the same-text rows (at most `limit` of them) are dropped from it here, and `limit` others
    remain. With `agents` (owners at hand, e.g. the asking agent's) each duplicate comes with
    its owner, the others read in one more query; without, only what the memory row holds.
    """
    flat = [(candidates, probe) for candidates, probes in searches for probe in probes]
    if not flat:
        return [[] for _ in searches]
    return run_near_duplicates(
        near_duplicates_sql(flat, threshold=threshold, limit=limit),
        [len(probes) for _, probes in searches],
        threshold=threshold,
        limit=limit,
        agents=agents,
    )


def near_duplicates_sql(
    flat: Sequence[tuple[QuerySet[Memory], Probe]],
    *,
    threshold: float,
    limit: int,
    plan_mode_reset: bool = False,
) -> tuple[str, list]:
    """The statement `near_duplicates_in` runs for these (candidate set, probe) pairs. A probe's
    `embedding` may be given as pgvector's text input already (a compiled statement's slot).
    `plan_mode_reset`: once planned, the statement sets `plan_cache_mode` back to the session's
    (a store's kind guard asked for generic plans just before it: `kind_registry.kind_guard`)."""
    wheres: dict[int, tuple[str, list]] = {}  # each candidate set's WHERE, compiled once
    branches: list[str] = []
    params: list = []
    for index, (candidates, probe) in enumerate(flat):
        if id(candidates) not in wheres:
            wheres[id(candidates)] = _where(candidates)
        where, where_params = wheres[id(candidates)]
        if probe.memory_id is not None:  # a stored memory is never its own duplicate
            where = f"{where} AND {_TABLE}.id <> %s"
            where_params = [*where_params, probe.memory_id]
        branches.append(
            f"(SELECT {_COLUMNS}, %s AS probe, NULL::float8 AS distance FROM {_TABLE} "
            f"WHERE {where} AND content_hash = %s ORDER BY created_at, id LIMIT %s)"
        )
        params += [index, *where_params, probe.content_hash, limit]
        if probe.embedding is not None:
            vector = probe.embedding
            # The threshold outside the LIMIT (the index walk stays a plain k-NN): only actual
            # duplicates come back, usually none.
            # The vectors' own table, joined to the memories the set's filters keep.
            branches.append(
                f"(SELECT * FROM (SELECT {_QUALIFIED}, %s AS probe, vec.embedding <=> %s::vector "
                f"AS distance FROM {_VECTORS} vec JOIN {_TABLE} ON {_TABLE}.id = vec.memory_id "
                f"WHERE {where} AND vec.model = %s ORDER BY distance LIMIT %s) v "
                "WHERE 1 - v.distance >= %s)"
            )
            params += [index, vector if isinstance(vector, str) else vector_literal(vector)]
            params += [*where_params, probe.embedding_model, 2 * limit, threshold]
    if plan_mode_reset:
        branches.append(_PLAN_MODE_RESET)
    return " UNION ALL ".join(branches), params


def run_near_duplicates(
    statement: tuple[str, list],
    counts: Sequence[int],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
    agents: Sequence[Agent] | None = None,
) -> list[list[list[Near]]]:
    """Runs `near_duplicates_sql`'s statement (of `counts[i]` probes for the i-th candidate
    set) and gives what `near_duplicates_in` gives."""
    return near_duplicates_sent(
        statement, counts, threshold=threshold, limit=limit, agents=agents
    )()


def near_duplicates_sent(
    statement: tuple[str, list],
    counts: Sequence[int],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
    agents: Sequence[Agent] | None = None,
) -> Callable[[], list[list[list[Near]]]]:
    """`run_near_duplicates`' statement executed, and what reads its answer: called after a
    pipeline's end (`memoryhub.pipeline`), the statement rode with others."""
    # HNSW keeps scanning past filtered-out rows (pgvector ≥ 0.8): a setting the connection
    # holds from its start, or this transaction sets (`memoryhub.hnsw`).
    cursor = connection.cursor()
    with hnsw.scan_settings(hnsw.EF_SEARCH, savepoint=False):
        cursor.execute(*statement)
    return lambda: _near_found(cursor, counts, threshold=threshold, limit=limit, agents=agents)


def _near_found(
    cursor: Any,
    counts: Sequence[int],
    *,
    threshold: float,
    limit: int,
    agents: Sequence[Agent] | None,
) -> list[list[list[Near]]]:
    with cursor:
        fetched = cursor.fetchall()
    total = sum(counts)
    # Memories with the statement's `probe` and `distance` columns as attributes.
    exact: list[list[Any]] = [[] for _ in range(total)]
    near: list[list[Any]] = [[] for _ in range(total)]
    # Usually none: a store's look-alikes are the exception.
    rows: list[Any] = _LOADER.load(fetched) if fetched else []
    if agents is not None:
        _with_agents(rows, agents)
    for memory in rows:
        (exact if memory.distance is None else near)[memory.probe].append(memory)
    found = []
    for same, neighbours in zip(exact, near, strict=True):
        pairs = [(memory, 1.0) for memory in same]
        seen = {memory.pk for memory in same}
        others = [memory for memory in neighbours if memory.pk not in seen]
        others.sort(key=lambda memory: memory.distance)
        for memory in others[:limit]:
            similarity = 1.0 - float(memory.distance)
            if similarity >= threshold:
                pairs.append((memory, round(min(max(similarity, 0.0), 1.0), 4)))
        pairs.sort(key=lambda pair: (-pair[1], pair[0].created_at, pair[0].id))
        found.append(pairs[:limit])
    out: list[list[list[Near]]] = []
    position = 0
    for count in counts:
        out.append(found[position : position + count])
        position += count
    return out


# The statement is written out: compiled by the ORM (four branches of a 40-column select with
# its owner's 20) it cost most of a store's CPU. The candidate sets' own filters (tenant,
# visibility, status) still come from their querysets: only their WHERE is compiled.
_TABLE = Memory._meta.db_table
_FIELDS = [f for f in Memory._meta.concrete_fields if f.name not in VECTOR_FIELDS]
_COLUMNS = ", ".join(f.column for f in _FIELDS)
_QUALIFIED = ", ".join(f"{_TABLE}.{f.column}" for f in _FIELDS)
_VECTORS = MemoryVector._meta.db_table
_LOADER = RowLoader(Memory, _FIELDS, ["probe", "distance"])
# A branch of no rows whose condition, evaluated when the statement runs (after its plan was
# chosen), sets the plan mode back to the session's for the rest of the transaction.
_PLAN_MODE_RESET = (
    f"(SELECT {', '.join(['NULL'] * (len(_FIELDS) + 2))} WHERE set_config('plan_cache_mode', "
    "(SELECT reset_val FROM pg_settings WHERE name = 'plan_cache_mode'), true) IS NULL)"
)


def _where(candidates: QuerySet[Memory]) -> tuple[str, list]:
    """The candidate set's filters as SQL on the memory table alone (no joins)."""
    query = candidates.query
    joined = [a for a in query.alias_map if a != _TABLE and query.alias_refcount.get(a)]
    if joined:
        raise ValueError(f"near-duplicate candidates must filter the memory table alone: {joined}")
    compiler = query.get_compiler(using=candidates.db)
    sql, params = compiler.compile(query.where)
    return sql or "TRUE", list(params)


def _with_agents(rows: list[Memory], known: Sequence[Agent]) -> None:
    """Each row's owner (what `select_related("agent")` gave): the known ones, the others in one
    query."""
    agents = {agent.pk: agent for agent in known}
    missing = {m.agent_id for m in rows if m.agent_id is not None} - set(agents)
    if missing:  # rows of one tenant: the candidate sets are tenant-scoped
        agents.update(Agent.objects.for_tenant(rows[0].tenant_id).in_bulk(missing))
    for memory in rows:
        memory.agent = agents[memory.agent_id] if memory.agent_id is not None else None

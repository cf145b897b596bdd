"""Search, hydrate's archival match and hydrate's pools run statements compiled once per shape:
each, bound to a request's values, is exactly the statement built for that request, and ranks
alike."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from accounts.principal import Principal
from memories.clock import resolve_now
from memories.compiled import CompiledSQL, Slot, _literal
from memories.embeddings import get_embedder
from memories.retrieval import hydrate, search
from memories.retrieval.params import parse_hydrate, parse_search
from memories.retrieval.ranking import RankingArgs, ranked_ids, ranking_sql, sql_with_params
from memories.services.store import memory_store
from memories.visibility import reads_from_ids
from tests.factories import make_agent

BODIES = [
    {"query": "hiking trip"},
    {"query": "hiking trip", "mode": "keyword", "limit": 60},
    {"query": "hiking trip", "mode": "semantic", "min_score": 0.1},
    {"query": "what did Ann do on 8 May 2023 and in June", "subject_id": "ann"},
    {"query": "trip", "include_shared": False, "kind": "fact"},
    {"query": "trip", "categories": ["preference", "fact"], "thread_id": "t1"},
    {"query": "trip", "category": "archival", "limit": 3, "min_score": 0.0},
    {"query": "trip", "tags": ["outdoors"]},
    {"query": "trip", "key_prefix": "trip_"},
]


@pytest.fixture
def reader(tenant, agent):
    friend = make_agent(tenant, "friend-bot")
    agent.reads_from.set([friend])
    agent._reads_from_ids = None
    for owner in (agent, friend):
        me = Principal(tenant=tenant, agent=owner)
        for i, text in enumerate(
            ["A hiking trip to the Alps", "Ann went hiking in June", "The trip was long"]
        ):
            memory_store(
                principal=me,
                data={"text": f"{owner.slug}: {text}", "key": f"trip_{i}", "tags": ["outdoors"]},
            )
        memory_store(
            principal=me, data={"text": "Ann's trip to Rome", "subject_id": "ann", "kind": "fact"}
        )
    reader = Principal(tenant=tenant, agent=agent)
    # For the bodies that filter by thread and category, and the archival one.
    for data in (
        {"text": "Plans for the trip", "category": "preference", "thread_id": "t1"},
        {"text": "An old trip diary", "category": "archival"},
    ):
        memory_store(principal=reader, data=data)
    return reader


def _vector(params) -> tuple[list[float] | None, str | None]:
    """The request's query vector and model (none for a keyword search)."""
    if params.mode == "keyword":
        return None, None
    embedder = get_embedder()
    return embedder.embed([params.query])[0], embedder.model_name


def _args(params) -> RankingArgs:
    vector, model = _vector(params)
    return RankingArgs.of(
        query=params.query,
        vector=vector,
        mode=params.mode,
        limit=params.limit,
        min_score=params.min_score,
        model=model,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("body", BODIES, ids=[str(i) for i in range(len(BODIES))])
@pytest.mark.parametrize("exact", [False, True])
def test_compiled_statement_is_the_statement_built_for_the_request(reader, body, exact):
    params = parse_search(reader, body)
    now = resolve_now(None)
    shared = reads_from_ids(reader.agent) if params.include_shared else []
    args = replace(_args(params), vector_owners=search.vector_owners(reader, shared))
    built = ranking_sql(search.search_scope(reader, params, now), args, exact=exact)
    if exact and not (params.tags or params.key_prefix):
        # The exact statement has the shape's constants written in, the request's values bound.
        built = _inlined(built, search.search_statement(reader, params, now, args)(exact)[1])
    # A large scope's, with its query vector written in (planned for each request).
    built = search._planned_per_request(built, args, exact)
    assert search.search_statement(reader, params, now, args)(exact) == built
    # The same again (the cached statement, another request's values bound to it).
    assert search.search_statement(reader, params, now, args)(exact) == built


def _inlined(statement: tuple[str, list], kept: list) -> tuple[str, list]:
    """`statement` with every parameter but `kept` (in order) written in as a literal."""
    sql, params = statement
    pieces, values, remaining = re.split(r"(%[s%])", sql), iter(params), list(kept)
    out = []
    for piece in pieces:
        if piece != "%s":
            out.append(piece)
            continue
        value = next(values)
        if remaining and value == remaining[0] and type(value) is type(remaining[0]):
            out.append("%s")
            remaining.pop(0)
        else:
            out.append(_literal(value))
    assert not remaining
    return "".join(out), list(kept)


@pytest.mark.django_db
@pytest.mark.parametrize("body", BODIES, ids=[str(i) for i in range(len(BODIES))])
def test_ranked_search_ranks_as_ranked_ids(reader, body):
    params = parse_search(reader, body)
    now = resolve_now(None)
    vector, model = _vector(params)
    expected = ranked_ids(
        search.search_scope(reader, params, now),
        query=params.query,
        vector=vector,
        mode=params.mode,
        limit=params.limit,
        min_score=params.min_score,
        model=model,
    )
    got = search.ranked_search(reader, params, now, vector=vector, model=model)
    assert got  # the fixture holds matches for every body: never two empty lists compared
    assert got == expected


def test_a_slot_the_statement_lost_is_refused_unless_optional():
    slots = Slot()
    kept, lost = slots.int("kept"), slots.text("lost")
    with pytest.raises(ValueError, match="lost"):
        CompiledSQL("SELECT %s, %s", [kept, lost.upper()], slots)
    statement = CompiledSQL("SELECT %s, %s", [kept, 7], slots, optional=frozenset({"lost"}))
    assert statement.bind(kept=3, lost="unused") == ("SELECT %s, %s", [3, 7])


def test_inlined_constants_are_literals_and_slots_stay_parameters():
    slots = Slot()
    tenant, text = slots.int("tenant"), slots.text("text")
    sql = "SELECT %s WHERE t = %s AND s = %s AND x LIKE 'a%%' AND y -%s > %s LIMIT %s"
    statement = CompiledSQL(sql, [text, tenant, "it's 5%", -3, 0.5, 10], slots, inline=True)
    assert statement.sql == (
        "SELECT %s WHERE t = %s AND s = 'it''s 5%%' AND x LIKE 'a%%' AND y - -3 > 0.5 LIMIT 10"
    )
    assert statement.bind(tenant=7, text="hi") == (statement.sql, ["hi", 7])
    when = slots.time("when")
    # Only the code's own constants are written in: anything else is refused, not guessed at.
    for value in (datetime(2026, 1, 1, tzinfo=UTC), b"bytes", "nul\x00", float("nan")):
        with pytest.raises(TypeError):
            CompiledSQL("SELECT %s, %s", [when, value], slots, inline=True)
    with pytest.raises(ValueError, match="more parameters"):
        CompiledSQL("SELECT %s", [when, 1], slots, inline=True)


def test_score_slots_never_equal_id_slots():
    slots = Slot()
    ids = [slots.int(f"i{n}") for n in range(3)]
    scores = [slots.float(f"f{n}") for n in range(3)]
    assert not set(ids) & set(scores)
    assert len(slots.names) == 6


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"subject_id": "ann", "thread_id": "t1"},
        {"include_agent_core": False},
        {"include_user_core": False, "subject_id": "ann"},
    ],
)
@pytest.mark.parametrize("shared", [False, True])
def test_compiled_hydrate_pools_are_the_built_ones(reader, body, shared):
    if not shared:
        reader.agent.reads_from.clear()
        reader.agent._reads_from_ids = None
    params = parse_hydrate(reader, body)
    now = resolve_now(None)
    built = [
        [sql_with_params(hydrate._part_rows(part, core=index < 2)) for part in pool]
        for index, pool in enumerate(hydrate._hydrate_pools(reader, params, now))
    ]
    compiled = hydrate._pool_statements(reader, params, now)
    assert [[(sql, tuple(p)) for sql, p in pool] for pool in compiled] == built
    # The user core block: the subject's user memories; the agent's: its own (and shared).
    user_core = 1 if params.subject_id and params.include_user_core else 0
    agent_core = (2 if shared else 1) if params.include_agent_core else 0
    recent = 2 + bool(params.subject_id) + shared
    assert [len(pool) for pool in built] == [user_core, agent_core, recent]

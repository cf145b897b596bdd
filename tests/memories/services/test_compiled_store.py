"""A store's look-alike search runs a statement compiled once per shape: bound to the store's
values it is exactly the statement built from the look-alike querysets."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.principal import Principal
from memories.dedup import _FIELDS, _LOADER, NEAR_LIMIT, near_duplicates_sql
from memories.models import Memory
from memories.retrieval import search
from memories.services.store import (
    Formation,
    _look_alikes_sent,
    look_alike_sets,
    look_alike_statement,
    memory_store,
    memory_store_prepare,
)
from memories.visibility import reads_from_ids
from tests.factories import make_agent, seed_synthetic
from tests.support.sql import rendered


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann"])
@pytest.mark.parametrize("reads_from", [0, 2])
@pytest.mark.parametrize("live", [True, False])
@pytest.mark.parametrize("formation", [False, True])
def test_compiled_look_alike_statement_is_the_built_one(
    tenant, agent, subject_id, reads_from, live, formation
):
    agent.reads_from.set([make_agent(tenant, f"peer-{i}") for i in range(reads_from)])
    agent._reads_from_ids = None
    agent.dedup_threshold = 0.8125
    principal = Principal(tenant=tenant, agent=agent)
    body = {"text": "Ann's greyhound is called Pixel"}
    if subject_id:
        body["subject_id"] = subject_id
    formed = Formation(evidence={}) if formation else None
    prepared = memory_store_prepare(principal=principal, data=body, formation=formed)
    assert len(reads_from_ids(agent)) == reads_from
    sets = look_alike_sets(
        tenant, agent, prepared.subject_id, prepared.now, live=live, formation=formation
    )
    built = near_duplicates_sql(
        [(rows, prepared.probe) for rows in sets],
        threshold=0.8125,
        limit=NEAR_LIMIT,
        plan_mode_reset=True,
    )
    compiled = look_alike_statement(prepared, live=live)
    # The shape's constants (statuses, categories, limits) are written into its SQL; with the
    # request's values written in as well, it is the same text PostgreSQL would be sent.
    assert len(compiled[1]) < len(built[1])
    assert rendered(*compiled) == rendered(*built)
    assert look_alike_statement(prepared, live=live) == compiled  # from the cache, the same


@pytest.mark.django_db
def test_only_duplicates_at_or_above_the_threshold_come_back(tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    first = memory_store(principal=principal, data={"text": "Ann's greyhound is called Pixel"})
    memory_store(principal=principal, data={"text": "The office closes at six on Fridays"})
    body = {"text": "Ann's old greyhound is called Pixel", "dedup_policy": "insert"}
    # Exact neighbours: this is about the threshold, not the HNSW walk, which in a long test run
    # meets the dead index entries of every rolled-back test before it and may stop early
    # (pgvector's hnsw.max_scan_tuples) without reaching a live row.
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_indexscan = off")

    def near(threshold: float) -> list:
        agent.dedup_threshold = threshold
        prepared = memory_store_prepare(principal=principal, data=body)
        return _look_alikes_sent(prepared, live=True)()[1]

    (found, similarity), *_rest = near(0.0)
    assert found.pk == first.memory.pk and 0.5 < similarity < 1.0
    assert [m.pk for m, _ in near(similarity - 0.0001)] == [first.memory.pk]
    assert near(similarity + 0.0001) == []


def _plans(fragment: str) -> tuple[int, int]:
    """(generic, custom) plans so far of this connection's prepared statements holding
    `fragment`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), sum(generic_plans), sum(custom_plans) FROM pg_prepared_statements "
            "WHERE strpos(statement, %s) > 0",
            [fragment],
        )
        count, generic, custom = cursor.fetchone()
    assert count, f"no prepared statement holds {fragment}"
    return generic, custom


@pytest.mark.django_db
def test_a_warm_connection_stores_and_recalls_without_planning_again(
    api_client, tenant, agent, monkeypatch
):
    """The look-alike search of every store and the recall by key are prepared statements
    whose constants are literals: after PostgreSQL's first few custom plans, each execution
    reuses one generic plan (the look-alike one cost more to plan than to run). With their
    statuses, categories and limits as parameters, a table of some size with statistics made
    PostgreSQL plan every execution anew. The search ranking over a large scope and hydrate's
    pools still are planned for each request's values (their best plan depends on them); a
    small scope's exact ranking has a generic plan (tests/memories/retrieval/test_exact_scope.py)."""
    monkeypatch.setattr(search, "EXACT_SCOPE", 0)  # every scope large: the HNSW statement
    seed_synthetic(tenant, [agent, make_agent(tenant, "crowd")], 1500)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")

    def search_and_hydrate(i: int) -> None:
        body = {"query": f"what did Ann say about the trip {i}", "mode": "hybrid"}
        assert api_client.post("/api/v1/search", body, format="json").status_code == 200
        assert api_client.post("/api/v1/hydrate", {}, format="json").status_code == 200

    for i in range(12):
        body = {"text": f"Reminder {i}: the office plants need water", "key": f"plants-{i}"}
        assert api_client.post("/api/v1/memories", body, format="json").status_code == 201
        body = {"text": f"Ann walked the greyhound on day {i}"}
        assert api_client.post("/api/v1/memories", body, format="json").status_code == 201
        assert api_client.get(f"/api/v1/memories/by-key/plants-{i}").status_code == 200
        search_and_hydrate(i)
    generic_ones = ("AS probe", '"memories_memory"."key" = $')
    custom_ones = ("SELECT id, size_bytes, updated_at, chars FROM",)
    before = {name: _plans(name) for name in generic_ones + custom_ones}
    for i in range(3):
        body = {"text": f"Bob fed the cat on day {i}"}
        assert api_client.post("/api/v1/memories", body, format="json").status_code == 201
        assert api_client.get(f"/api/v1/memories/by-key/plants-{i}").status_code == 200
        search_and_hydrate(20 + i)
    for name in generic_ones:
        generic, custom = before[name]
        assert _plans(name) == (generic + 3, custom), name
    for name in custom_ones:
        generic, custom = before[name]
        assert _plans(name)[0] == generic and _plans(name)[1] >= custom + 3, name
    # The ranking over a large scope carries its query vector written in: never prepared,
    # planned for each request's values.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_prepared_statements WHERE strpos(statement, 'kw_all AS') > 0"
            " AND strpos(statement, 'memories_memoryvector') > 0"
        )
        assert cursor.fetchone() == (0,)


@pytest.mark.django_db
def test_look_alikes_are_loaded_as_the_raw_queryset_loads_them(tenant, agent):
    """The look-alike statement's rows become the instances `Memory.objects.raw` made of them:
    every field converted (JSON, arrays, times), the probe and the distance as attributes."""
    principal = Principal(tenant=tenant, agent=agent)
    body = {
        "text": "Ann's greyhound is called Pixel",
        "data": {"name": "Pixel", "legs": 4},
        "tags": ["dogs"],
        "mentions": [{"name": "Ann"}],
        "dedup_policy": "insert",
    }
    memory_store(principal=principal, data=body)
    memory_store(principal=principal, data={**body, "text": "Ann's greyhound is named Pixel"})
    with connection.cursor() as cursor:  # exact neighbours (see the threshold test above)
        cursor.execute("SET LOCAL enable_indexscan = off")
    agent.dedup_threshold = 0.0
    prepared = memory_store_prepare(principal=principal, data=body)
    statement = look_alike_statement(prepared, live=True)
    raw = sorted(Memory.objects.raw(*statement), key=lambda m: (m.probe, m.pk, m.distance or 0))
    with connection.cursor() as cursor:
        cursor.execute(*statement)
        loaded = _LOADER.load(cursor.fetchall())
    loaded.sort(key=lambda m: (m.probe, m.pk, m.distance or 0))
    assert len(loaded) == len(raw) >= 3  # the same text once, and two neighbours
    fields = [f.attname for f in _FIELDS]
    for ours, theirs in zip(loaded, raw, strict=True):
        assert [getattr(ours, name) for name in fields] == [
            getattr(theirs, name) for name in fields
        ]
        assert (ours.probe, ours.distance) == (theirs.probe, theirs.distance)
        assert ours.data == {"name": "Pixel", "legs": 4} and ours.tags == ["dogs"]
        assert not ours._state.adding and ours.get_deferred_fields() == theirs.get_deferred_fields()

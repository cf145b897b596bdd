"""A store's look-alike search runs a statement compiled once per shape: bound to the store's
values it is exactly the statement built from the look-alike querysets."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.dedup import NEAR_LIMIT, near_duplicates_sql
from memories.services.store import (
    _look_alikes,
    look_alike_sets,
    look_alike_statement,
    memory_store,
    memory_store_prepare,
)
from memories.visibility import reads_from_ids
from tests.factories import make_agent


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann"])
@pytest.mark.parametrize("reads_from", [0, 2])
@pytest.mark.parametrize("live", [True, False])
def test_compiled_look_alike_statement_is_the_built_one(
    tenant, agent, subject_id, reads_from, live
):
    agent.reads_from.set([make_agent(tenant, f"peer-{i}") for i in range(reads_from)])
    agent._reads_from_ids = None
    agent.dedup_threshold = 0.8125
    principal = Principal(tenant=tenant, agent=agent)
    body = {"text": "Ann's greyhound is called Pixel"}
    if subject_id:
        body["subject_id"] = subject_id
    prepared = memory_store_prepare(principal=principal, data=body)
    assert len(reads_from_ids(agent)) == reads_from
    sets = look_alike_sets(tenant, agent, prepared.subject_id, prepared.now, live=live)
    built = near_duplicates_sql(
        [(rows, prepared.probe) for rows in sets], threshold=0.8125, limit=NEAR_LIMIT
    )
    assert look_alike_statement(prepared, live=live) == built
    assert look_alike_statement(prepared, live=live) == built  # from the cache, the same


@pytest.mark.django_db
def test_only_duplicates_at_or_above_the_threshold_come_back(tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    first = memory_store(principal=principal, data={"text": "Ann's greyhound is called Pixel"})
    memory_store(principal=principal, data={"text": "The office closes at six on Fridays"})
    body = {"text": "Ann's old greyhound is called Pixel", "dedup_policy": "insert"}

    def near(threshold: float) -> list:
        agent.dedup_threshold = threshold
        prepared = memory_store_prepare(principal=principal, data=body)
        return _look_alikes(prepared, live=True)[1]

    (found, similarity), *rest = near(0.0)
    assert found.pk == first.memory.pk and 0.5 < similarity < 1.0
    assert [m.pk for m, _ in near(similarity - 0.0001)] == [first.memory.pk]
    assert near(similarity + 0.0001) == []

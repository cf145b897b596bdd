"""`memories.dedup`: the near-duplicate rule asked of several candidate sets in one statement."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories import dedup
from memories.models import Memory, Status
from memories.services.store import memory_store
from tests.factories import make_agent


def _store(agent, text: str):
    principal = Principal(tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write"}))
    data = {"text": text, "dedup_policy": "insert"}
    return memory_store(principal=principal, data=data).memory


def _probe(memory: Memory, *, stored: bool = False) -> dedup.Probe:
    return dedup.Probe(
        content_hash=memory.content_hash,
        embedding=memory.embedding,
        embedding_model=memory.embedding_model,
        memory_id=memory.pk if stored else None,
    )


def test_each_candidate_set_gets_its_own_answer_in_one_statement(agent):
    live = _store(agent, "Ana's greyhound is called Pixel")
    gone = _store(agent, "Ana's greyhound is called Pixel")
    Memory.objects.filter(pk=gone.pk).update(status=Status.TOMBSTONED)
    other = _store(agent, "The office closes at six on Fridays")
    rows = Memory.objects.for_tenant(agent.tenant)
    active, tombstoned = rows.filter(status=Status.ACTIVE), rows.filter(status=Status.TOMBSTONED)

    with CaptureQueriesContext(connection) as queries:
        found = dedup.near_duplicates_in(
            [(active, [_probe(live), _probe(other)]), (tombstoned, [_probe(live)])],
            threshold=0.99,
            agents=[agent],
        )

    selects = [q for q in queries.captured_queries if "UNION ALL" in q["sql"]]
    assert len(selects) == 1
    (live_near, other_near), (tombstone_near,) = found
    assert [(m.pk, sim) for m, sim in live_near] == [(live.pk, 1.0)]
    assert [(m.pk, sim) for m, sim in other_near] == [(other.pk, 1.0)]
    assert [(m.pk, sim) for m, sim in tombstone_near] == [(gone.pk, 1.0)]
    # Owners come attached (the asking agent's from what the caller holds: no query for it).
    assert live_near[0][0].agent is agent


def test_a_stored_memory_is_never_its_own_duplicate(agent):
    first = _store(agent, "The launch moved to March")
    second = _store(agent, "The launch moved to March")
    candidates = Memory.objects.for_tenant(agent.tenant).filter(status=Status.ACTIVE)

    (near,) = dedup.near_duplicates(candidates, [_probe(first, stored=True)], threshold=0.99)

    assert [m.pk for m, _ in near] == [second.pk]


def test_owners_of_other_agents_are_read_from_the_same_tenant(agent):
    colleague = make_agent(agent.tenant, slug="colleague")
    theirs = _store(colleague, "Deploys happen on Tuesdays")
    candidates = Memory.objects.for_tenant(agent.tenant)

    ((near,),) = dedup.near_duplicates_in(
        [(candidates, [_probe(theirs)])], threshold=0.99, agents=[agent]
    )

    assert near[0][0].agent.pk == colleague.pk


def test_a_candidate_set_that_needs_a_join_is_refused(agent):
    memory = _store(agent, "Standups start at nine")
    joined = Memory.objects.for_tenant(agent.tenant).filter(agent__slug=agent.slug)

    with pytest.raises(ValueError, match="memory table alone"):
        dedup.near_duplicates(joined, [_probe(memory)], threshold=0.9)

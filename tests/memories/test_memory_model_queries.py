"""The memory model's cost on the hot paths, pinned (docs/benchmarks.md times them): a store adds
one statement (`kind_registry.kind_guard`: the kind's lock and the registry's version together), a single
kind's replace costs what a keyed update costs, and hydrate's two core blocks cost what the one core
pool did (an empty block costs nothing)."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.retrieval.hydrate import memory_hydrate
from memories.services.store import memory_store

# savepoint, kind guard with the write's announcement (`memories.horizon.announcement`) and the
# cap lock (one statement), look-alikes, the memory with its revision and its event (one
# statement), cap count, release; the HNSW settings are the connection's (`memoryhub.hnsw`)
PLAIN_STORE = 6
# + the slot read and the insert's own savepoint (create), the cap lock its own statement; an
# update: its savepoint, UPDATE, revision with its event, release, and no cap check
SLOT_CREATE, SLOT_UPDATE = 10, 9


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("first", "second", "counts"),
    [
        ({"text": "Likes tea."}, {"text": "Likes coffee."}, (PLAIN_STORE, PLAIN_STORE)),
        (
            {"text": "Plan A", "key": "plan"},
            {"text": "Plan B", "key": "plan"},
            (SLOT_CREATE, SLOT_UPDATE),
        ),
        (
            {"kind": "UserProfile", "subject_id": "ann", "data": {"name": "Ann"}},
            {"kind": "UserProfile", "subject_id": "ann", "data": {"name": "Anna"}},
            (SLOT_CREATE, SLOT_UPDATE),
        ),
    ],
)
def test_store_statements(tenant, agent, django_assert_num_queries, first, second, counts):
    me = Principal(tenant=tenant, agent=agent)
    memory_store(principal=me, data={"text": "Warms the registry's cache up."})
    with django_assert_num_queries(counts[0]):
        memory_store(principal=me, data=first)
    with django_assert_num_queries(counts[1]):
        memory_store(principal=me, data=second)


@pytest.mark.django_db
def test_hydrate_statements(tenant, agent, django_assert_num_queries):
    me = Principal(tenant=tenant, agent=agent)
    memory_store(principal=me, data={"text": "Core fact."})
    memory_store(principal=me, data={"text": "Note.", "category": "daily"})
    memory_store(principal=me, data={"text": "Ann's.", "scope": "user", "subject_id": "ann"})
    # The agent core walk, the recency walk, the entries' JSON, the access bump and the day's
    # read count.
    with django_assert_num_queries(5):
        memory_hydrate(principal=me, data={})
    # + the user core block's walk.
    with django_assert_num_queries(6):
        result = memory_hydrate(principal=me, data={"subject_id": "ann"})
    assert len(result["entries"]) == 3

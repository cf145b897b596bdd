"""The owner split of the visibility rule covers exactly the visible memories."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.models import Memory
from memories.services.store import memory_store
from memories.visibility import visible_memories, visible_memories_by_owner
from tests.factories import make_agent


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann"])
@pytest.mark.parametrize("include_shared", [True, False])
def test_parts_by_owner_are_the_visible_set(
    tenant, other_tenant, agent, subject_id, include_shared
):
    friend, stranger = make_agent(tenant, "friend-bot"), make_agent(tenant, "stranger-bot")
    outsider = make_agent(other_tenant, "support-bot")
    agent.reads_from.set([friend])
    agent._reads_from_ids = None
    for owner in (agent, friend, stranger, outsider):
        me = Principal(tenant=owner.tenant, agent=owner)
        for body in (
            {"text": f"{owner.slug} plain"},
            {"text": f"{owner.slug} about ann", "subject_id": "ann"},
            {"text": f"{owner.slug} about bob", "subject_id": "bob"},
            {"text": f"{owner.slug} team", "category": "workspace"},
            {"text": f"{owner.slug} run", "category": "conversation", "thread_id": "t1"},
            {"text": f"{owner.slug} gone", "ttl": "1s"},
        ):
            memory_store(principal=me, data={**body, "dedup_policy": "insert"})
    Memory.objects.filter(text__endswith="gone").update(expires_at="2000-01-01T00:00:00Z")
    scope = {
        "tenant": tenant,
        "agent": agent,
        "subject_id": subject_id,
        "include_shared": include_shared,
    }
    expected = list(visible_memories(**scope).values_list("id", flat=True))
    parts = [list(part.values_list("id", flat=True)) for part in visible_memories_by_owner(**scope)]
    together = [mid for part in parts for mid in part]
    assert sorted(together) == sorted(expected)  # same rows, none twice
    assert len(expected) >= 4

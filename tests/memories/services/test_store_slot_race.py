"""A keyed store whose key is taken between its look and its insert (a concurrent store won the
slot): the insert's unique violation, answered at the end of the round trip the insert shares
with the owner's count (`memoryhub.pipeline`), rolls back its savepoint only, and the store
does what it always did: writes into the key's memory, or, under compare-and-set, answers a
conflict naming the winner's version."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.models import Memory
from memories.services import store as store_service
from memories.services.store import memory_store
from memoryhub.errors import Conflict


@pytest.fixture(params=[True, False], ids=["pipelined", "apart"])
def winner(request, settings, monkeypatch, tenant, agent) -> Memory:
    """The key's memory, stored first; the next store's first look for it finds none (as if the
    winner had not committed yet), and its later looks see it."""
    settings.MEMORYHUB_DB_PIPELINE = request.param
    me = Principal(tenant=tenant, agent=agent)
    first = memory_store(principal=me, data={"text": "Plan A", "key": "plan"}).memory
    real, looks = store_service._slot, []

    def slot(prepared, **by):
        looks.append(by)
        return None if len(looks) == 1 else real(prepared, **by)

    monkeypatch.setattr(store_service, "_slot", slot)
    return first


@pytest.mark.django_db
def test_the_store_writes_into_the_winners_memory(tenant, agent, winner):
    me = Principal(tenant=tenant, agent=agent)
    result = memory_store(principal=me, data={"text": "Plan B", "key": "plan"})
    assert result.action == "updated" and result.memory.pk == winner.pk
    live = Memory.objects.filter(tenant=tenant, key="plan", status="active")
    assert [(m.pk, m.text, m.version) for m in live] == [(winner.pk, "Plan B", 2)]
    assert Memory.objects.filter(tenant=tenant).count() == 1  # the failed insert left nothing


@pytest.mark.django_db
def test_under_compare_and_set_it_is_a_conflict(tenant, agent, winner):
    me = Principal(tenant=tenant, agent=agent)
    with pytest.raises(Conflict) as raised:
        memory_store(principal=me, data={"text": "Plan B", "key": "plan", "expected_version": 0})
    assert raised.value.details == {"current_version": 1}
    assert Memory.objects.get(pk=winner.pk).text == "Plan A"
    assert Memory.objects.filter(tenant=tenant).count() == 1

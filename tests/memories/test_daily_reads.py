"""Reads counted per tenant and UTC day (`DailyReads`, the dashboard's reads chart): one per
get or recall that found a memory, search and hydrate; merged with the access bumps."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories import access
from memories.models import DailyReads
from memories.retrieval.hydrate import memory_hydrate
from memories.retrieval.search import memory_search
from memories.selectors import memory_recall
from memories.services.store import memory_store
from tests.factories import make_agent, make_tenant

LATE = datetime(2026, 3, 1, 23, 59, 30, tzinfo=UTC)


def counts(tenant) -> dict[date, int]:
    return dict(DailyReads.objects.for_tenant(tenant).values_list("day", "reads"))


@pytest.fixture
def me(agent):
    principal = Principal(tenant=agent.tenant, agent=agent)
    memory_store(principal=principal, data={"text": "Likes green tea", "key": "tea"}, now=LATE)
    return principal


@pytest.mark.django_db
def test_each_read_over_http_counts_once_and_a_list_or_a_miss_does_not(api_client, tenant):
    api_client.post("/api/v1/memories", {"text": "Prefers email", "key": "contact"}, format="json")
    memory_id = api_client.get("/api/v1/memories/by-key/contact").json()["memory"]["id"]
    api_client.get(f"/api/v1/memories/{memory_id}")
    api_client.post("/api/v1/search", {"query": "nothing like it"}, format="json")
    api_client.post("/api/v1/hydrate", {}, format="json")
    api_client.get("/api/v1/memories")  # a list is not a read of memories' content
    api_client.get("/api/v1/memories/by-key/missing")  # found nothing
    assert sum(counts(tenant).values()) == 4


@pytest.mark.django_db
def test_reads_are_counted_by_utc_day_and_tenant(me, tenant):
    memory_recall(principal=me, key="tea", now=LATE)
    memory_search(principal=me, data={"query": "tea"}, now=LATE + timedelta(seconds=10))
    memory_hydrate(principal=me, data={}, now=LATE + timedelta(minutes=1))  # the next day
    other = Principal(tenant=make_tenant("globex"), agent=make_agent(make_tenant("globex")))
    memory_search(principal=other, data={"query": "tea"}, now=LATE)
    assert counts(tenant) == {date(2026, 3, 1): 2, date(2026, 3, 2): 1}
    assert counts(other.tenant) == {date(2026, 3, 1): 1}


@pytest.mark.django_db
def test_deferred_reads_are_merged_into_the_bumps_statement(me, tenant, settings):
    settings.MEMORYHUB_ACCESS_BUMP = "deferred"
    for _ in range(3):
        memory_recall(principal=me, key="tea", now=LATE)
    memory_search(principal=me, data={"query": "nothing here at all"}, now=LATE)
    assert counts(tenant) == {}  # nothing written inside the requests
    with CaptureQueriesContext(connection) as ctx:
        assert access.flush_access() == 1  # one memory bumped
    assert len(ctx.captured_queries) == 1
    assert counts(tenant) == {date(2026, 3, 1): 4}
    memory_search(principal=me, data={"query": "nothing here at all"}, now=LATE)
    access.flush_access()  # reads alone (no memory returned) are written too
    assert counts(tenant) == {date(2026, 3, 1): 5}


@pytest.mark.django_db
def test_off_counts_nothing(me, tenant, settings):
    settings.MEMORYHUB_ACCESS_BUMP = "off"
    memory_recall(principal=me, key="tea", now=LATE)
    assert counts(tenant) == {}

"""Retention (docs/memory-model.md#retention): policies per tenant and agent, a key's `memory_ttl`,
the read-time lifetimes of `daily` and `conversation`; the effective `expires_at` on the memory."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.db import connection

from accounts.services import api_key_create
from memories import retention
from memories.models import Memory
from memories.retention import expiry_sql
from memories.services.policies import agent_policy_set, tenant_policy_set
from tests.factories import make_agent

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def at(when):
    return time_machine.travel(when, tick=False)


def store(client, **body):
    response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()["memory"]


def visible(client, memory_id, subject=None):
    query = f"?subject_id={subject}" if subject else ""
    return client.get(f"/api/v1/memories/{memory_id}{query}").status_code == 200


def iso(when):
    return when.isoformat(timespec="microseconds").replace("+00:00", "Z")


@pytest.mark.django_db
def test_a_7_day_ttl_under_a_1_hour_max_retention_expires_after_an_hour(api_client, tenant):
    tenant_policy_set(tenant=tenant, max_retention={"core": 3600})
    with at(T0):
        memory = store(api_client, text="Trial account", ttl="7d")
    # The memory object shows the effective expiry.
    assert memory["expires_at"] == iso(T0 + HOUR)
    with at(T0 + HOUR - timedelta(seconds=1)):
        assert visible(api_client, memory["id"])
    with at(T0 + HOUR):
        assert not visible(api_client, memory["id"])
        assert api_client.get("/api/v1/memories").json()["memories"] == []
        found = api_client.post("/api/v1/search", {"query": "trial"}, format="json").json()
        assert found["memories"] == []
    # `expires_at: null` cannot opt out.
    with at(T0):
        forever = store(api_client, text="Keep forever", expires_at=None)
    assert forever["expires_at"] == iso(T0 + HOUR)


@pytest.mark.django_db
def test_the_agents_retention_wins_and_a_write_restarts_it(api_client, tenant, agent):
    tenant_policy_set(tenant=tenant, max_retention={"core": 3600, "daily": 7200})
    agent_policy_set(tenant=tenant, agent=agent, max_retention={"core": 86400})
    with at(T0):
        core = store(api_client, text="Prefers tea", key="drink")
        note = store(api_client, text="Called today", category="daily")
    assert core["expires_at"] == iso(T0 + timedelta(days=1))  # the agent's entry
    assert note["expires_at"] == iso(T0 + 2 * HOUR)  # the tenant's, shorter than 72 h
    with at(T0 + timedelta(hours=20)):
        again = store(api_client, text="Prefers green tea", key="drink")
    assert again["expires_at"] == iso(T0 + timedelta(hours=44))  # counted from the last write


@pytest.mark.django_db
def test_a_policy_change_moves_the_stored_expiry_at_once(api_client, tenant, agent):
    with at(T0):
        memory = store(api_client, text="Ships on Monday")
        workspace = store(api_client, text="Office closed Friday", category="workspace")
    assert memory["expires_at"] is None
    with at(T0 + 2 * HOUR):
        tenant_policy_set(tenant=tenant, max_retention={"core": 3600, "workspace": 3600})
        assert not visible(api_client, memory["id"])
        assert not visible(api_client, workspace["id"])
        # Loosened again (the agent's own entry), the memory is back: nothing was pruned.
        agent_policy_set(tenant=tenant, agent=agent, max_retention={"core": 86400})
        assert visible(api_client, memory["id"])
        assert not visible(api_client, workspace["id"])  # the workspace's follows the tenant
    assert Memory.objects.get(pk=memory["id"]).version == 1  # a policy is not a change


@pytest.mark.django_db
def test_a_key_with_memory_ttl_cannot_write_a_memory_that_outlives_it(key_client, tenant, agent):
    from rest_framework.test import APIClient

    _, raw = api_key_create(tenant=tenant, agent=agent, memory_ttl=timedelta(hours=24))
    trial = APIClient()
    trial.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    with at(T0):
        longer = store(trial, text="Trial note", ttl="30d")
        never = store(trial, text="Trial fact", expires_at=None)
        shorter = store(trial, text="Quick note", ttl="1h")
    assert longer["expires_at"] == never["expires_at"] == iso(T0 + timedelta(hours=24))
    assert shorter["expires_at"] == iso(T0 + HOUR)
    with at(T0 + timedelta(hours=2)):
        patched = trial.patch(
            f"/api/v1/memories/{never['id']}", {"expires_at": None}, format="json"
        ).json()["memory"]
    assert patched["expires_at"] == iso(T0 + timedelta(hours=26))
    # Another key of the same agent is not bound by it.
    with at(T0):
        free = store(key_client(agent), text="Paid note")
    assert free["expires_at"] is None
    with at(T0 + timedelta(hours=26)):
        assert not visible(trial, never["id"])


@pytest.mark.django_db
def test_daily_and_conversation_lifetimes_hold_at_read_time_without_a_prune(api_client):
    with at(T0):
        daily = store(api_client, text="Standup at 10", category="daily")
        chat = store(api_client, text="Asked about refunds", category="conversation", thread_id="t")
    assert daily["expires_at"] == iso(T0 + timedelta(hours=72))
    assert chat["expires_at"] == iso(T0 + timedelta(hours=24))
    with at(T0 + timedelta(hours=71)):
        assert visible(api_client, daily["id"])
        hydrated = api_client.post("/api/v1/hydrate", {"thread_id": "t"}, format="json").json()
        assert [e["id"] for e in hydrated["entries"]] == [daily["id"]]  # the chat is 71 h idle
    with at(T0 + timedelta(hours=72)):
        assert not visible(api_client, daily["id"])
        listed = api_client.get("/api/v1/memories?category=daily").json()["memories"]
        assert listed == []
    # Nothing was pruned: the rows are still `active`.
    assert set(Memory.objects.values_list("status", flat=True)) == {"active"}
    # The prune job still counts them under their category's rule, not as `expired`.
    out = StringIO()
    call_command("prune_memories", "--now", (T0 + timedelta(hours=72)).isoformat(), stdout=out)
    assert '"daily_pruned": 1' in out.getvalue() and '"conversation_ended": 1' in out.getvalue()


@pytest.mark.django_db
def test_the_recompute_statement_is_the_python_rule(tenant, agent):
    """`retention.expiry_sql` (the recompute after a policy change) is `effective_expiry`."""
    from accounts.principal import Principal
    from memories.services.store import memory_store

    other = make_agent(tenant, "other-bot")
    tenant_policy_set(tenant=tenant, max_retention={"core": 600, "notes": 7200, "daily": 90000})
    agent_policy_set(tenant=tenant, agent=agent, max_retention={"core": 1200, "daily": 100})
    memories = []
    for owner in (agent, other):
        me = Principal(tenant=tenant, agent=owner)
        for body in (
            {"text": "a"},
            {"text": "b", "category": "notes", "ttl": "1h"},
            {"text": "c", "category": "notes", "ttl": "3h"},
            {"text": "d", "category": "daily"},
            {"text": "e", "category": "conversation", "thread_id": "t"},
            {"text": "f", "category": "workspace"},
            {"text": "g", "category": "archival", "expires_at": None},
            {"text": "h", "scope": "user", "subject_id": "ann", "ttl": "5m"},
        ):
            data = {**body, "dedup_policy": "insert"}
            memories.append(memory_store(principal=me, data=data, now=T0).memory)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m.id, {expiry_sql('m')} FROM memories_memory m WHERE m.tenant_id = %s",
            [tenant.pk],
        )
        in_sql = dict(cursor.fetchall())
    tenant.refresh_from_db()
    in_python = {
        m.pk: retention.effective_expiry(
            requested=m.requested_expires_at,
            last_write=m.updated_at,
            category=m.category,
            tenant=tenant,
            owner=m.agent,
        )
        for m in memories
    }
    assert in_sql == in_python
    assert {m.pk: m.expires_at for m in memories} == in_python
    assert len(set(in_python.values())) > 4  # the cases differ


@pytest.mark.django_db
def test_tenant_policy_command_prints_the_policy(tenant):
    out = StringIO()
    call_command(
        "tenant_policy",
        "--tenant",
        "acme",
        "--max-retention",
        "daily=48h",
        "core=365d",
        "--user-cap",
        "50",
        stdout=out,
    )
    policy = json.loads(out.getvalue())
    assert policy == {
        "tenant": "acme",
        "workspace_cap": 10000,
        "user_cap": 50,
        "max_retention": {"core": "365d", "daily": "2d"},
        "extraction_daily_token_budget": 0,
    }
    out = StringIO()
    call_command("tenant_policy", "--tenant", "acme", "--max-retention", "daily=none", stdout=out)
    assert json.loads(out.getvalue())["max_retention"] == {"core": "365d"}

"""User scope (docs/memory-model.md#scopes-agent-and-user) beyond visibility
(tests/memories/api/test_access.py): what a user memory may be, its cap per subject, erasure,
export and backups."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from accounts.principal import Principal
from memories.jsonl import export_jsonl
from memories.models import Memory, MemoryRevision, OwnerCount
from memories.services.jsonl_import import jsonl_import
from memories.services.policies import tenant_policy_set
from memories.services.store import memory_store
from tests.factories import make_agent

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def store(client, **body):
    return client.post("/api/v1/memories", body, format="json")


@pytest.mark.django_db
def test_what_a_user_memory_may_be(api_client, key_client, agent):
    no_subject = store(api_client, text="Allergic to nuts", scope="user")
    assert no_subject.status_code == 400
    assert no_subject.json()["error"]["details"]["field"] == "subject_id"
    for category, extra in (("workspace", {}), ("conversation", {"thread_id": "t"})):
        refused = store(
            api_client, text="x", scope="user", subject_id="ann", category=category, **extra
        )
        assert refused.json()["error"]["details"]["field"] == "category"
    assert store(api_client, text="x", scope="everyone", subject_id="ann").status_code == 400
    # A key bound to a subject stores user memories of that subject without naming it.
    bound = key_client(agent, subject_id="ann")
    memory = store(bound, text="Allergic to nuts", scope="user").json()["memory"]
    assert (memory["scope"], memory["subject_id"], memory["agent"]) == ("user", "ann", None)
    assert memory["source"] == "user"
    row = Memory.objects.get(pk=memory["id"])
    assert row.agent_id is None and row.created_by == "agent:support-bot"
    # A user memory stays one: no PATCH moves it into the workspace.
    moved = bound.patch(f"/api/v1/memories/{row.pk}", {"category": "workspace"}, format="json")
    assert moved.status_code == 400


@pytest.mark.django_db
def test_a_key_and_a_subject_hold_one_user_memory_for_every_agent(key_client, tenant, agent):
    first = key_client(agent)
    second = key_client(make_agent(tenant, "billing-bot"))
    a = store(first, text="Ann: vegan", key="diet", scope="user", subject_id="ann").json()
    b = store(second, text="Ann: vegetarian", key="diet", scope="user", subject_id="ann").json()
    # The key is the subject's: the second agent's store updates the first one's memory.
    assert b["memory_id"] == a["memory_id"] and b["action"] == "updated"
    # The agent's own memory under that key, and a workspace memory about Ann, are others.
    own = store(first, text="Ann's diet noted", key="diet", subject_id="ann").json()
    shared = store(first, text="Team diet", key="diet", subject_id="ann", category="workspace")
    assert len({a["memory_id"], own["memory_id"], shared.json()["memory_id"]}) == 3


@pytest.mark.django_db
def test_user_memories_count_against_the_tenants_user_cap_per_subject(tenant, agent):
    tenant_policy_set(tenant=tenant, user_cap=2)
    me = Principal(tenant=tenant, agent=agent)
    other = Principal(tenant=tenant, agent=make_agent(tenant, "billing-bot"))

    def put(principal, text, minute, subject="ann"):
        data = {"text": text, "scope": "user", "subject_id": subject, "dedup_policy": "insert"}
        return memory_store(
            principal=principal, data=data, now=T0 + timedelta(minutes=minute)
        ).memory

    oldest = put(me, "Ann is vegan", 0)
    put(other, "Ann lives in Porto", 1)
    put(me, "Bob is vegan", 2, subject="bob")
    put(me, "Ann is 34", 3)  # the third of Ann's: the coldest of hers goes
    ann = Memory.objects.filter(subject_id="ann", scope="user")
    assert sorted(ann.values_list("status", flat=True)) == ["active", "active", "evicted"]
    assert Memory.objects.get(pk=oldest.pk).status == "evicted"
    assert MemoryRevision.objects.get(memory_id=oldest.pk, change_type="evict").reason == (
        "user cap of 2 reached"
    )
    # Neither the agents' own caps nor the workspace count user memories.
    assert OwnerCount.objects.get(tenant_id=tenant.pk, owner_id=-1, subject_id="ann").active == 2
    assert not OwnerCount.objects.filter(tenant_id=tenant.pk, owner_id=0, active__gt=0).exists()
    # Lowered further, the prune job's sweep enforces it too.
    tenant_policy_set(tenant=tenant, user_cap=1)
    out = StringIO()
    call_command("prune_memories", "--now", (T0 + timedelta(hours=1)).isoformat(), stdout=out)
    assert json.loads(out.getvalue().strip().splitlines()[-1])["evicted"] == 1
    assert ann.filter(status="active").count() == 1


@pytest.mark.django_db
def test_erasing_a_subject_erases_its_user_memories(key_client, tenant, agent):
    admin = key_client(agent, scopes=["read", "write", "admin"])
    mine = store(admin, text="Ann is vegan", scope="user", subject_id="ann").json()["memory_id"]
    theirs = store(
        key_client(make_agent(tenant, "billing-bot")),
        text="Ann pays by card",
        scope="user",
        subject_id="ann",
    ).json()["memory_id"]
    bob = store(admin, text="Bob is vegan", scope="user", subject_id="bob").json()["memory_id"]
    erased = admin.delete("/api/v1/subjects/ann?purge=true").json()
    assert erased["memories"] == 2
    for memory_id in (mine, theirs):
        row = Memory.objects.get(pk=memory_id)
        assert row.purged_at is not None and row.text == ""
    assert Memory.objects.get(pk=bob).status == "active"


@pytest.mark.django_db
def test_export_and_backups_keep_the_scope(api_client, tenant, other_tenant, agent):
    memory = store(
        api_client, text="Ann is vegan", key="diet", scope="user", subject_id="ann"
    ).json()["memory"]
    exported = api_client.get("/api/v1/export.md?subject_id=ann").getvalue().decode()
    assert "- scope: user" in exported and "Ann is vegan" in exported
    assert memory["id"] not in api_client.get("/api/v1/export.md").getvalue().decode()
    [_header, line] = "".join(export_jsonl(tenant, Memory.objects.for_tenant(tenant))).splitlines()
    record = json.loads(line)
    assert record["scope"] == "user" and record["agent"] is None
    # Imported into another tenant, under another id, it is that tenant's user memory of Ann.
    record["id"] = "mem_01JZZZZZZZZZZZZZZZZZZZZZZZ"
    result = jsonl_import(tenant=other_tenant, lines=[json.dumps(record)], actor="test")
    assert result.created == 1
    copy = Memory.objects.get(pk=record["id"])
    assert (copy.tenant_id, copy.scope, copy.subject_id, copy.agent_id) == (
        other_tenant.pk,
        "user",
        "ann",
        None,
    )
    bad = dict(record, id="mem_01JYYYYYYYYYYYYYYYYYYYYYYY", subject_id=None)
    with pytest.raises(Exception, match="subject_id"):
        jsonl_import(tenant=other_tenant, lines=[json.dumps(bad)], actor="test")

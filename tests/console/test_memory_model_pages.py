"""The console's memory model (docs/memory-model.md): the Kinds page, the Tenant page, the agent's
block limits, retention and formation fields, the over-limit mark, a memory's data as a table of its
kind's schema fields, and a key's memory TTL."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from accounts.models import ApiKey
from memories.models import Kind, Memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(login, admin_user):
    return login(admin_user)


def test_kinds_page_lists_the_registry_with_live_counts(viewer_client, agent, store_memory):
    store_memory(agent, "Ann", kind="UserProfile", subject_id="ann", data={"name": "Ann"})
    store_memory(agent, "A label", kind="Ticket")
    page = viewer_client.get("/console/kinds/").content.decode()
    for name in ("fact", "UserProfile", "AgentInstructions", "InteractionLog"):
        assert f'data-kind="{name}"' in page
    profile_row = page.split('data-kind="UserProfile"')[1].split("</tr>")[0]
    assert "single" in profile_row and "create_user_profile" in profile_row
    assert re.search(r"data-kind-count>1<", profile_row)
    assert "<code>Ticket</code>: 1 live" in page  # a free label in use
    assert "Save kind" not in page


def test_create_edit_and_delete_a_kind(admin_client, agent, store_memory):
    bad = admin_client.post(
        "/console/kinds/",
        {
            "name": "Invoice",
            "cardinality": "multiple",
            "memory_type": "episodic",
            "schema": '{"type": "objectt"}',
        },
    )
    assert bad.status_code == 422
    assert "not a valid JSON Schema" in bad.content.decode()
    not_json = admin_client.post(
        "/console/kinds/",
        {"name": "Invoice", "cardinality": "multiple", "memory_type": "episodic", "schema": "{"},
    )
    assert not_json.status_code == 422 and "Not JSON" in not_json.content.decode()
    assert not Kind.objects.filter(name="Invoice").exists()

    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    created = admin_client.post(
        "/console/kinds/",
        {
            "name": "Invoice",
            "cardinality": "multiple",
            "memory_type": "episodic",
            "description": "An invoice.",
            "default_category": "archival",
            "schema": json.dumps(schema),
        },
    )
    assert created.status_code == 302 and created["Location"] == "/console/kinds/Invoice/"
    kind = Kind.objects.get(name="Invoice")
    assert (kind.schema, kind.default_category, kind.memory_type) == (
        schema,
        "archival",
        "episodic",
    )
    detail = admin_client.get("/console/kinds/Invoice/").content.decode()
    assert "create_invoice" in detail and "An invoice." in detail

    store_memory(agent, "Invoice 7", kind="Invoice", data={"amount": 7})
    # An edit the stored data would break is refused on the form.
    stricter = {**schema, "required": ["amount", "currency"]}
    refused = admin_client.post(
        "/console/kinds/Invoice/",
        {"cardinality": "multiple", "memory_type": "episodic", "schema": json.dumps(stricter)},
    )
    assert refused.status_code == 422
    assert "do not satisfy the new schema" in refused.content.decode()
    edited = admin_client.post(
        "/console/kinds/Invoice/",
        {"cardinality": "multiple", "memory_type": "semantic", "description": "Invoices."},
    )
    assert edited.status_code == 302
    kind.refresh_from_db()
    assert (kind.memory_type, kind.description, kind.schema) == ("semantic", "Invoices.", None)
    # In use: not deleted, and said so.
    in_use = admin_client.post("/console/kinds/Invoice/delete/", follow=True)
    assert "used by 1 live memories" in in_use.content.decode()
    assert Kind.objects.filter(name="Invoice").exists()
    Memory.objects.filter(kind="Invoice").update(status="tombstoned")
    assert admin_client.post("/console/kinds/Invoice/delete/").status_code == 302
    assert not Kind.objects.filter(name="Invoice").exists()


def test_tenant_page_edits_the_user_cap_and_retention(
    admin_client, viewer_client, tenant, agent, store_memory
):
    memory = store_memory(agent, "Kept for a while")
    page = viewer_client.get("/console/tenant/").content.decode()
    assert "User memories per subject" in page and "1000" in page
    response = admin_client.post(
        "/console/tenant/", {"user_cap": 50, "max_retention": "core=1s, daily = 48h"}
    )
    assert response.status_code == 302
    tenant.refresh_from_db()
    assert (tenant.user_cap, tenant.max_retention) == (50, {"core": 1, "daily": 172800})
    memory.refresh_from_db()
    assert memory.expires_at == memory.updated_at + timedelta(seconds=1)
    shown = admin_client.get("/console/tenant/").content.decode()
    assert 'value="core=1s, daily=2d"' in shown
    bad = admin_client.post("/console/tenant/", {"user_cap": 50, "max_retention": "core=forever"})
    assert bad.status_code == 422 and "core:" in bad.content.decode()


def test_agent_page_edits_block_limits_retention_and_formation(admin_client, agent):
    response = admin_client.post(
        f"/console/agents/{agent.slug}/",
        {
            "entry_cap": 1000,
            "hydration_budget_bytes": 8000,
            "default_category": "core",
            "dedup_threshold": 0.9,
            "core_max_entries": 5,
            "core_max_chars": 900,
            "archival_max_chars": 3000,
            "max_retention": "daily=12h",
            "context_messages": 7,
            "formation_user_scope": "false",
        },
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    policy = agent.policy()
    assert (policy["core_max_entries"], policy["core_max_chars"]) == (5, 900)
    assert policy["archival_max_chars"] == 3000 and policy["max_retention"] == {"daily": "12h"}
    assert policy["context_messages"] == 7 and policy["formation_user_scope"] is False
    page = admin_client.get(f"/console/agents/{agent.slug}/").content.decode()
    assert "Hydration limits" in page and 'value="daily=12h"' in page
    # A post of the older fields alone keeps the newer ones.
    admin_client.post(
        f"/console/agents/{agent.slug}/",
        {
            "entry_cap": 900,
            "hydration_budget_bytes": 8000,
            "default_category": "core",
            "dedup_threshold": 0.9,
        },
    )
    agent.refresh_from_db()
    assert (agent.entry_cap, agent.core_max_entries, agent.max_retention) == (
        900,
        5,
        {"daily": 43200},
    )


def test_an_agent_over_its_core_limits_is_marked(owner_client, agent, store_memory):
    agent.core_max_entries = 3
    agent.save()
    for n in range(3):
        store_memory(agent, f"Core fact {n}")
    assert "data-core-over" not in owner_client.get("/console/agents/").content.decode()
    store_memory(agent, "One more for Ann", subject_id="ann")
    listed = owner_client.get("/console/agents/").content.decode()
    assert listed.count("data-core-over") == 1 and "4 core entries" in listed
    assert "data-core-over" in owner_client.get(f"/console/agents/{agent.slug}/").content.decode()


def test_a_memorys_data_is_a_table_of_its_schemas_fields(viewer_client, agent, store_memory):
    memory = store_memory(
        agent,
        "Ann's profile",
        kind="UserProfile",
        subject_id="ann",
        scope="user",
        data={"name": "Ann", "timezone": "Europe/Lisbon", "pets": ["cat"]},
    )
    page = viewer_client.get(f"/console/memories/{memory.pk}/").content.decode()
    table = page.split("data-data-table")[1].split("</table>")[0]
    fields = re.findall(r'data-data-field="([^"]+)"', table)
    # The schema's fields (with none where the memory has no value; in the order PostgreSQL's
    # jsonb keeps an object's keys: shortest first), then the fields it does not name.
    assert fields == ["name", "location", "timezone", "preferredLanguage", "pets"]
    assert "Europe/Lisbon" in table and '["cat"]' in table.replace("&quot;", '"')
    assert "(not in the schema)" in table
    assert "data-scope>user" in page


def test_a_key_created_with_a_memory_ttl(admin_client, agent):
    response = admin_client.post(
        f"/console/agents/{agent.slug}/keys/",
        {"scopes": ["read", "write"], "name": "trial", "memory_ttl": "24h"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    key = ApiKey.objects.get(name="trial")
    assert key.memory_ttl == timedelta(hours=24)
    assert ">1d<" in admin_client.get(f"/console/agents/{agent.slug}/").content.decode()

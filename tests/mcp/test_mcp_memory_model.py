"""The memory model over MCP (docs/memory-model.md): `memory_update` (compare-and-set),
`memory_keys`, the kinds' `create_<kind>` tools and `notifications/tools/list_changed`, user
scope."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.db.models import F
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.subscriptions import ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client

from accounts.models import Tenant
from accounts.principal import Principal
from memories.mcp.listen import CURRENT_TENANT, TenantBus
from memories.models import Kind, Memory, MemoryRevision
from memories.services import kind_changes
from tests.factories import make_agent, make_key, make_tenant
from tests.support.mcp import body, run_session


@pytest.fixture
def mcp_agent(transactional_db):
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write"])
    return agent, raw


def test_memory_update_is_compare_and_set(asgi_server, mcp_agent):
    _, raw = mcp_agent
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("memory_store", {"text": "Plan: Basic", "key": "plan", "subject_id": "ann"}),
            (
                "memory_update",
                {"key": "plan", "subject_id": "ann", "text": "Plan: Pro", "expected_version": 1},
            ),
            (
                "memory_update",
                {"key": "plan", "subject_id": "ann", "text": "Plan: Free", "expected_version": 1},
            ),
            ("memory_recall", {"key": "plan", "subject_id": "ann"}),
            ("memory_update", {"key": "missing", "text": "x"}),
            ("memory_update", {"text": "x"}),
        ],
    )
    stored, updated, stale, recalled, missing, neither = map(body, results)
    memory_id = stored["memory_id"]
    assert updated["ok"] is True and updated["memory"]["id"] == memory_id
    assert updated["memory"]["version"] == 2 and updated["memory"]["text"] == "Plan: Pro"
    assert results[2].is_error
    assert stale["error"]["code"] == "CONFLICT"
    assert stale["error"]["details"]["current_version"] == 2
    assert recalled["memory"]["text"] == "Plan: Pro"
    assert missing["error"]["code"] == "NOT_FOUND"
    assert neither["error"]["details"]["field"] == "memory_id"
    assert MemoryRevision.objects.filter(memory_id=memory_id).count() == 2


def test_memory_update_by_id_keeps_rest_rules(asgi_server, mcp_agent):
    _, raw = mcp_agent
    _, results = run_session(asgi_server, raw, [("memory_store", {"text": "Likes tea."})])
    memory_id = body(results[0])["memory_id"]
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("memory_update", {"memory_id": memory_id, "tags": ["Drinks"], "ttl": "7d"}),
            ("memory_update", {"memory_id": memory_id, "importance": 0.9}),
            ("memory_update", {"memory_id": memory_id, "expires_at": None}),
        ],
    )
    tagged, unknown, cleared = map(body, results)
    assert tagged["memory"]["tags"] == ["drinks"] and tagged["memory"]["expires_at"] is not None
    assert unknown["error"]["code"] == "INVALID_INPUT"  # not one of the tool's arguments
    assert cleared["memory"]["expires_at"] is None


def test_memory_keys_lists_the_visible_keys(asgi_server, mcp_agent):
    _, raw = mcp_agent
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("memory_store", {"text": "Name is Ann", "key": "user.name"}),
            ("memory_store", {"text": "Speaks Portuguese", "key": "user.language"}),
            ("memory_store", {"text": "Ship by Friday", "key": "project.deadline"}),
            ("memory_store", {"text": "Lives in Porto", "key": "user.city", "subject_id": "x"}),
            ("memory_keys", {}),
            ("memory_keys", {"prefix": "user."}),
            ("memory_keys", {"prefix": "user.", "subject_id": "x"}),
            ("memory_keys", {"category": "daily"}),
        ],
    )
    assert body(results[4])["keys"] == ["project.deadline", "user.language", "user.name"]
    assert body(results[5]) == {"ok": True, "keys": ["user.language", "user.name"]}
    assert body(results[6])["keys"] == ["user.city", "user.language", "user.name"]
    assert body(results[7])["keys"] == []


def test_a_kind_tool_stores_that_kind_and_replaces_a_single_one(asgi_server, mcp_agent):
    _agent, raw = mcp_agent
    _, results = run_session(
        asgi_server,
        raw,
        [
            (
                "create_user_profile",
                {"name": "Ann", "timezone": "Europe/Lisbon", "subject_id": "ann", "scope": "user"},
            ),
            ("create_user_profile", {"name": "Ann", "location": "Porto", "subject_id": "ann"}),
            (
                "create_user_profile",
                {"name": "Ann", "location": "Lisbon", "subject_id": "ann", "scope": "user"},
            ),
            ("create_user_profile", {"name": 42, "subject_id": "ann", "scope": "user"}),
        ],
    )
    first, own, replaced, invalid = map(body, results)
    assert first["action"] == "created" and first["memory"]["kind"] == "UserProfile"
    assert first["memory"]["scope"] == "user" and first["memory"]["source"] == "user"
    assert first["memory"]["data"] == {"name": "Ann", "timezone": "Europe/Lisbon"}
    # The agent's own profile of Ann is another owner's record.
    assert own["action"] == "created" and own["memory"]["scope"] == "agent"
    assert replaced["action"] == "replaced" and replaced["memory_id"] == first["memory_id"]
    assert replaced["memory"]["data"] == {"name": "Ann", "location": "Lisbon"}
    assert invalid["error"]["code"] == "INVALID_INPUT"
    assert invalid["error"]["details"]["errors"][0]["path"] == "/name"
    assert Memory.objects.filter(kind="UserProfile", status="active").count() == 2


async def _listen_for_a_change(url: str, key: str, change) -> tuple[set, object, set]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        Client(streamable_http_client(f"{url}/mcp", http_client=http_client)) as client,
    ):
        before = {tool.name for tool in (await client.list_tools()).tools}
        async with client.listen(tools_list_changed=True) as subscription:
            await asyncio.to_thread(change)
            event = await asyncio.wait_for(subscription.__anext__(), 20)
        after = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
    return before, event, after


def test_a_registry_change_announces_tools_list_changed(asgi_server, mcp_agent):
    agent, raw = mcp_agent

    def register_invoice():
        kind_changes.kind_save(
            tenant=agent.tenant,
            name="Invoice",
            data={"schema": {"type": "object", "properties": {"number": {"type": "string"}}}},
        )

    before, event, after = asyncio.run(_listen_for_a_change(asgi_server, raw, register_invoice))
    assert "create_invoice" not in before
    assert isinstance(event, ToolsListChanged)
    assert "create_invoice" in after
    assert "create_user_profile" in after and "memory_store" in after


def test_the_bus_tells_only_the_changed_tenants_streams():
    bus = TenantBus()
    seen: list[str] = []
    bus._start = lambda: None  # no database here: deliveries are handed in directly
    for tenant_id, name in ((1, "acme"), (2, "globex")):
        token = CURRENT_TENANT.set(tenant_id)
        try:
            bus.subscribe(lambda event, name=name: seen.append((name, type(event).__name__)))
        finally:
            CURRENT_TENANT.reset(token)
    bus.deliver(1)
    assert seen == [("acme", "ToolsListChanged")]


def test_kind_tools_are_listed_to_their_tenant_only(asgi_server, mcp_agent):
    agent, raw = mcp_agent
    other = make_agent(make_tenant("globex"), "globex-bot")
    _, other_raw = make_key(other, scopes=["read", "write"])
    kind_changes.kind_save(
        tenant=other.tenant, name="Shipment", data={"schema": {"type": "object"}}
    )
    mine, _ = run_session(asgi_server, raw, [])
    theirs, results = run_session(asgi_server, other_raw, [("create_shipment", {"id": "s1"})])
    assert "create_shipment" not in mine and "create_shipment" in theirs
    assert body(results[0])["memory"]["kind"] == "Shipment"
    _, results = run_session(asgi_server, raw, [("create_shipment", {"id": "s1"})])
    assert results[0].is_error  # no such tool for this tenant
    assert not Memory.objects.filter(tenant=agent.tenant, kind="Shipment").exists()


def test_user_scoped_store_over_mcp_needs_a_subject(asgi_server, mcp_agent):
    agent, raw = mcp_agent
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("memory_store", {"text": "Allergic to peanuts", "scope": "user"}),
            ("memory_store", {"text": "Allergic to peanuts", "scope": "user", "subject_id": "ann"}),
        ],
    )
    refused, stored = map(body, results)
    assert refused["error"]["details"]["field"] == "subject_id"
    assert stored["memory"]["scope"] == "user" and stored["memory"]["agent"] is None
    other = Principal(tenant=agent.tenant, agent=make_agent(agent.tenant, "billing-bot"))
    _, other_raw = make_key(other.agent, scopes=["read"])
    _, results = run_session(
        asgi_server,
        other_raw,
        [
            ("memory_search", {"query": "peanuts", "subject_id": "ann"}),
            ("memory_search", {"query": "peanuts"}),
        ],
    )
    found, without = map(body, results)
    assert [(m["id"], m["source"]) for m in found["memories"]] == [(stored["memory_id"], "user")]
    assert without["memories"] == []
    assert json.dumps(found).count("Allergic to peanuts") == 1


def test_a_kind_tool_answers_hostile_data_with_a_tool_error(asgi_server, mcp_agent):
    """A kind tool's data meets the same bounded check as REST: a backtracking pattern, a check
    past its budget, and a stored schema the validator cannot run (one stored before today's
    registration checks, written here straight into the table) are each an INVALID_INPUT
    envelope, never a raw exception's text."""
    agent, raw = mcp_agent
    doubling = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(16)
    }
    doubling["d16"] = {"type": "array"}
    kind_changes.kind_save(
        tenant=agent.tenant,
        name="Probe",
        data={
            "schema": {
                "properties": {
                    "s": {"pattern": "^(a+)+$"},
                    "x": {"if": {"type": "array"}, "then": {"$ref": "#/$defs/d0"}},
                },
                "$defs": doubling,
            }
        },
    )
    Kind.objects.create(
        tenant=agent.tenant,
        name="Legacy",
        schema={
            "properties": {"p": {"$id": "http://h/sub", "$ref": "#/$defs/x"}},
            "$defs": {"x": {"type": "string"}},
        },
    )
    Tenant.objects.filter(pk=agent.tenant_id).update(kinds_version=F("kinds_version") + 1)
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("create_probe", {"s": "a" * 50 + "!"}),
            ("create_probe", {"x": []}),
            ("create_legacy", {"p": "a"}),
        ],
    )
    pattern, costly, legacy = map(body, results)
    assert all(result.is_error for result in results)
    assert pattern["error"]["code"] == "INVALID_INPUT"
    assert pattern["error"]["details"]["errors"][0]["path"] == "/s"
    assert costly["error"]["code"] == "INVALID_INPUT" and "budget" in costly["error"]["message"]
    assert legacy["error"]["code"] == "INVALID_INPUT"
    assert "cannot be evaluated" in legacy["error"]["message"]
    assert not Memory.objects.filter(kind__in=["Probe", "Legacy"]).exists()

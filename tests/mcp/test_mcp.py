"""The MCP endpoint, driven by the official `mcp` client against a real server."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from rest_framework.test import APIClient

from accounts.services import api_key_revoke
from memories.mcp import tools as _memory_tools  # noqa: F401 - registers the memory tools
from memories.mcp.server import mcp
from memories.models import Memory, MemoryRevision
from tests.factories import make_agent, make_key, make_tenant
from tests.support.mcp import GITHUB_TOKEN, body, run_session

TOOLS = {
    "memory_store",
    "memory_recall",
    "memory_list",
    "memory_forget",
    "memory_search",
    "memory_hydrate",
    "memory_ingest",
    "memory_update",
    "memory_keys",
    # One per kind with a schema of the tenant: the built-in UserProfile.
    "create_user_profile",
}


@pytest.fixture
def mcp_agent(transactional_db):
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write"])
    return agent, raw


def test_tools_session_store_recall_search_hydrate_forget(asgi_server, mcp_agent):
    _agent, raw = mcp_agent
    fact = "The customer's preferred language is Portuguese."
    names, results = run_session(
        asgi_server,
        raw,
        [
            (
                "memory_store",
                {"text": fact, "key": "pref.language", "category": "core", "subject_id": "u1"},
            ),
            ("memory_recall", {"key": "pref.language", "subject_id": "u1"}),
            ("memory_search", {"query": "preferred language", "subject_id": "u1"}),
            ("memory_hydrate", {"subject_id": "u1"}),
            ("memory_forget", {"key": "pref.language", "subject_id": "u1", "reason": "moved"}),
            ("memory_recall", {"key": "pref.language", "subject_id": "u1"}),
            ("memory_store", {"text": f"deploy with {GITHUB_TOKEN}"}),
        ],
    )
    assert names == TOOLS
    stored, recalled, searched, hydrated, forgotten, gone, secret = map(body, results)
    assert stored["ok"] is True and stored["message"] == "Ok"
    memory_id = stored["memory_id"]
    assert recalled["memory"]["id"] == memory_id and recalled["memory"]["text"] == fact
    assert searched["memories"][0]["id"] == memory_id
    assert [e["id"] for e in hydrated["entries"]] == [memory_id]
    assert forgotten == {"ok": True, "deleted": True, "memory_id": memory_id}
    assert gone == {"ok": True, "memory": None}
    assert results[-1].is_error
    assert secret["ok"] is False and secret["error"]["code"] == "SECRET_REJECTED"
    assert GITHUB_TOKEN not in results[-1].content[0].text
    assert secret["error"]["details"]["field"] == "text"
    assert Memory.objects.filter(pk=memory_id, status="tombstoned").exists()


def test_store_and_forget_refuse_secrets_in_every_free_text_field(asgi_server, mcp_agent, caplog):
    """The MCP tools share the REST store's scan: a few fields, each named, never echoed."""
    _agent, raw = mcp_agent
    caplog.set_level("DEBUG")
    fields = {
        "key": GITHUB_TOKEN,
        "kind": GITHUB_TOKEN,
        "subject_id": GITHUB_TOKEN,
        "thread_id": GITHUB_TOKEN,
        "source_provider": GITHUB_TOKEN,
        "mentions[0].name": [{"name": f"bot {GITHUB_TOKEN}", "type": "tool"}],
        "tags[0]": [GITHUB_TOKEN],
    }
    calls = [
        ("memory_store", {"text": "ok", field.split("[")[0]: value})
        for field, value in fields.items()
    ]
    calls.append(("memory_store", {"text": "Deploys go out on Tuesdays.", "key": "deploy.day"}))
    calls.append(("memory_forget", {"key": "deploy.day", "reason": f"leaked {GITHUB_TOKEN}"}))
    _, results = run_session(asgi_server, raw, calls)
    refused = [body(result) for result in results[: len(fields)]]
    assert [r["error"]["code"] for r in refused] == ["SECRET_REJECTED"] * len(fields)
    assert [r["error"]["details"]["field"] for r in refused] == list(fields)
    stored, forgotten = body(results[-2]), body(results[-1])
    assert stored["ok"] is True
    assert forgotten["error"]["details"] == {"rule": "github_token", "field": "reason"}
    for result in results:
        assert GITHUB_TOKEN not in result.content[0].text
    # The test's own MCP client logs what it sends (at DEBUG); the server logs none of it.
    server_side = [r for r in caplog.records if not r.name.startswith(("mcp.client", "http"))]
    assert server_side and all(GITHUB_TOKEN not in r.getMessage() for r in server_side)
    assert list(Memory.objects.values_list("key", "status")) == [("deploy.day", "active")]
    assert GITHUB_TOKEN not in str(list(MemoryRevision.objects.values()))


def test_key_of_another_tenant_sees_nothing(asgi_server, mcp_agent):
    _agent, raw = mcp_agent
    run_session(
        asgi_server, raw, [("memory_store", {"text": "Acme ships on Fridays.", "key": "ship.day"})]
    )
    stranger = make_agent(make_tenant("globex"), "support-bot")
    _, other_raw = make_key(stranger)
    _, results = run_session(
        asgi_server,
        other_raw,
        [
            ("memory_recall", {"key": "ship.day"}),
            ("memory_search", {"query": "Acme ships on Fridays"}),
            ("memory_list", {}),
            ("memory_hydrate", {}),
        ],
    )
    recalled, searched, listed, hydrated = map(body, results)
    assert recalled == {"ok": True, "memory": None}
    assert searched["memories"] == []
    assert listed["memories"] == []
    assert hydrated["entries"] == []


@pytest.mark.parametrize("header", [None, "Bearer mh_not-a-key", "Basic abc"])
def test_request_without_a_valid_key_is_refused_with_401(asgi_server, transactional_db, header):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if header:
        headers["Authorization"] = header
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    response = httpx.post(f"{asgi_server}/mcp", json=request, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    assert response.headers["www-authenticate"].startswith("Bearer")


MEMORY_FIELDS_COMPARED = (
    "key",
    "category",
    "kind",
    "text",
    "data",
    "tags",
    "subject_id",
    "thread_id",
    "importance",
    "confidence",
    "capture_mode",
    "source_provider",
    "mentions",
    "version",
    "status",
    "review_state",
    "size_bytes",
    "content_hash",
    "embedding_model",
    "created_by",
)


def test_mcp_and_rest_store_identical_memories_and_revisions(asgi_server, transactional_db):
    # Same agent slug in two tenants: the actor strings match, everything else must too.
    via_mcp = make_agent(make_tenant("mcp-side"), "support-bot")
    via_rest = make_agent(make_tenant("rest-side"), "support-bot")
    _, mcp_key = make_key(via_mcp)
    _, rest_key = make_key(via_rest)
    inputs = [
        {
            "text": "Colby's son lives in Los Angeles.",
            "key": "family.son",
            "tags": ["Family", "LA"],
            "importance": 0.8,
            "data": {"city": "Los Angeles"},
            "subject_id": "colby",
            "mentions": [{"name": "Colby", "type": "person"}],
        },
        {
            "text": "Colby's son moved to San Diego.",
            "key": "family.son",
            "subject_id": "colby",
            "tags": ["family"],
        },
        {"text": "Prefers short answers.", "category": "daily", "capture_mode": "inferred"},
    ]
    run_session(asgi_server, mcp_key, [("memory_store", dict(i)) for i in inputs])
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {rest_key}")
    for item in inputs:
        assert rest.post("/api/v1/memories", item, format="json").status_code in (200, 201)

    def memories(agent):
        rows = Memory.objects.filter(agent=agent).order_by("created_at", "id")
        return [
            {f: getattr(m, f) for f in MEMORY_FIELDS_COMPARED} | {"embedding": list(m.embedding)}
            for m in rows
        ]

    def revisions(agent):
        rows = MemoryRevision.objects.filter(tenant=agent.tenant).order_by("id")
        drop = {"last_confirmed_at", "expires_at"}
        return [
            (
                r.change_type,
                r.actor,
                r.version,
                r.reason,
                {k: v for k, v in (r.before or {}).items() if k not in drop},
                {k: v for k, v in (r.after or {}).items() if k not in drop},
            )
            for r in rows
        ]

    assert memories(via_mcp) == memories(via_rest)
    assert len(memories(via_mcp)) == 2
    assert revisions(via_mcp) == revisions(via_rest)
    assert len(revisions(via_mcp)) == 3


def test_tool_arguments_follow_the_rest_rules(asgi_server, mcp_agent):
    agent, raw = mcp_agent
    agent.default_ttl = timedelta(days=7)
    agent.save()
    in_a_day_ms = int((time.time() + 86400) * 1000)
    _, results = run_session(
        asgi_server,
        raw,
        [
            ("memory_store", {"text": "Typo in an argument.", "tll": "1h"}),
            ("memory_store", {"text": "Too important.", "importance": 5}),
            ("memory_search", {"query": "anything", "limit": 500}),
            ("memory_recall", {"key": "k", "subjekt": "u1"}),
            ("memory_store", {"text": "Expires tomorrow.", "expires_at": in_a_day_ms}),
            ("memory_store", {"text": "Never expires.", "expires_at": None}),
            ("memory_store", {"text": "Core fact about ferries.", "category": "core"}),
            ("memory_store", {"text": "Daily note about ferries.", "category": "daily"}),
            ("memory_search", {"query": "ferries", "category": "daily"}),
            ("memory_store", {"text": "Create only.", "key": "once", "expected_updated_at": None}),
            ("memory_store", {"text": "Again.", "key": "once", "expected_updated_at": None}),
        ],
    )
    typo, too_important, too_many, recall_typo = map(body, results[:4])
    for result, field in [(typo, "tll"), (too_important, "importance"), (too_many, "limit")]:
        assert result["ok"] is False and result["error"]["code"] == "INVALID_INPUT"
        assert result["error"]["details"]["field"] == field
    assert recall_typo["error"] == {
        "code": "INVALID_INPUT",
        "message": "Unknown field 'subjekt'",
        "details": {"field": "subjekt"},
    }
    expiring, never = body(results[4])["memory"], body(results[5])["memory"]
    assert expiring["expires_at"].startswith(
        datetime.fromtimestamp(in_a_day_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    )
    assert never["expires_at"] is None  # explicit null beats the agent's default TTL
    searched = body(results[8])["memories"]
    assert searched and {m["category"] for m in searched} == {"daily"}
    created, refused = body(results[9]), body(results[10])
    assert created["ok"] is True
    assert refused["error"]["code"] == "CONFLICT"
    assert not Memory.objects.filter(text__in=["Typo in an argument.", "Too important."]).exists()


def test_tool_schemas_refuse_unknown_arguments(asgi_server, mcp_agent):
    async def schemas(key):
        async with (
            create_mcp_http_client(headers={"Authorization": f"Bearer {key}"}) as http_client,
            streamable_http_client(f"{asgi_server}/mcp", http_client=http_client) as (r, w),
            ClientSession(r, w) as session,
        ):
            await session.initialize()
            return {t.name: t.input_schema for t in (await session.list_tools()).tools}

    listed = asyncio.run(schemas(mcp_agent[1]))
    assert set(listed) == TOOLS
    memory_tools = {name: schema for name, schema in listed.items() if name.startswith("memory_")}
    assert all(schema["additionalProperties"] is False for schema in memory_tools.values())
    # A kind's tool takes what its schema takes: UserProfile's properties are open.
    assert listed["create_user_profile"]["additionalProperties"] is True
    store = listed["memory_store"]["properties"]
    for field in ("session_id", "last_confirmed_at", "expected_updated_at", "expires_at"):
        assert field in store
    for field in ("category", "include_history", "session_id"):
        assert field in listed["memory_search"]["properties"]


def test_tool_schemas_are_titled_for_the_tool_not_its_python_function():
    """The memory tools' functions are `tool_<name>`; what `tools/list` shows names the tool
    alone, as the SDK would if the function bore the tool's name."""
    listed = asyncio.run(mcp.list_tools())
    assert {tool.name for tool in listed} == {name for name in TOOLS if name.startswith("memory_")}
    for tool in listed:
        assert tool.input_schema["title"] == f"{tool.name}Arguments"
        assert tool.output_schema["title"] == f"{tool.name}DictOutput"
        assert "tool_memory_" not in json.dumps([tool.input_schema, tool.output_schema])


def test_revoked_key_and_another_tenants_memory(asgi_server, mcp_agent):
    agent, raw = mcp_agent
    _, results = run_session(asgi_server, raw, [("memory_store", {"text": "Acme secret sauce."})])
    memory_id = body(results[0])["memory_id"]
    stranger = make_agent(make_tenant("globex"), "support-bot")
    _, other_raw = make_key(stranger, scopes=["read", "write", "admin"])
    _, results = run_session(
        asgi_server,
        other_raw,
        [
            ("memory_forget", {"memory_id": memory_id, "reason": "not yours"}),
            ("memory_forget", {"memory_id": memory_id, "purge": True}),
        ],
    )
    assert body(results[0])["error"]["code"] == "NOT_FOUND"
    assert body(results[0]) == body(results[1])
    assert Memory.objects.get(pk=memory_id).status == "active"

    key, revoked_raw = make_key(agent)
    api_key_revoke(tenant=agent.tenant, key_id=key.pk)
    response = httpx.post(
        f"{asgi_server}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "memory_store", "arguments": {"text": "Should never be stored."}},
        },
        headers={
            "Authorization": f"Bearer {revoked_raw}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"
    assert not Memory.objects.filter(text="Should never be stored.").exists()


def test_rest_and_mcp_requests_share_the_per_key_rate_limit(asgi_server, mcp_agent, settings):
    """One budget per key, whichever door a request uses: spent by REST, MCP is refused, and
    the other way round; another key of the same agent has its own."""
    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 3
    agent, raw = mcp_agent
    tools_list = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    def mcp(key: str) -> httpx.Response:
        headers = {
            "Authorization": f"Bearer {key}",
            "Accept": "application/json, text/event-stream",
        }
        return httpx.post(f"{asgi_server}/mcp", json=tools_list, headers=headers)

    def rest(key: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.get(f"{asgi_server}/api/v1/keys", headers=headers)

    # Two REST requests, one MCP request: the third of the minute's three. Then both doors shut.
    answered = [rest(raw), rest(raw), mcp(raw), mcp(raw), rest(raw)]
    assert [r.status_code for r in answered] == [200, 200, 200, 429, 429]
    for refused in answered[3:]:
        assert refused.json()["error"]["code"] == "RATE_LIMITED"
        assert int(refused.headers["retry-after"]) >= 1

    # The other way round, on a second key: MCP spends it, REST is refused.
    _, other = make_key(agent, scopes=["read", "write"])
    answered = [mcp(other), mcp(other), mcp(other), rest(other)]
    assert [r.status_code for r in answered] == [200, 200, 200, 429]
    assert answered[-1].json()["error"]["code"] == "RATE_LIMITED"


def test_list_and_search_tools_take_a_key_prefix(asgi_server, mcp_agent):
    _, key = mcp_agent
    stores = [
        ("memory_store", {"key": key_name, "text": "pears are kept here"})
        for key_name in ("team_a/x", "teamXa/y", "team_b/z")
    ]
    _, results = run_session(
        asgi_server,
        key,
        [
            *stores,
            ("memory_list", {"key_prefix": "team_a/"}),
            ("memory_search", {"query": "pears", "key_prefix": "team_a/"}),
            ("memory_list", {"key_prefix": "team\u200b"}),
        ],
    )
    listed, found, refused = (body(r) for r in results[3:])
    assert [m["key"] for m in listed["memories"]] == ["team_a/x"]
    assert [hit["key"] for hit in found["memories"]] == ["team_a/x"]
    assert refused["error"]["code"] == "INVALID_INPUT"
    assert refused["error"]["details"] == {"field": "key_prefix"}

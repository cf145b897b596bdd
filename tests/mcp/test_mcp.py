"""The MCP endpoint, driven by the official `mcp` client against a real server."""

from __future__ import annotations

import asyncio
import json
import random
import string

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from rest_framework.test import APIClient

from memories.models import Memory, MemoryRevision
from tests.factories import make_agent, make_key, make_tenant

# Built at run time so no token-shaped literal sits in the repository.
GITHUB_TOKEN = "ghp_" + "".join(
    random.Random(7).choices(string.ascii_letters + string.digits, k=36)
)
TOOLS = {
    "memory_store",
    "memory_recall",
    "memory_list",
    "memory_forget",
    "memory_search",
    "memory_hydrate",
}


async def _session_calls(url: str, key: str, calls: list[tuple[str, dict]]):
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        streamable_http_client(f"{url}/mcp", http_client=http_client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        results = []
        for name, args in calls:
            results.append(await session.call_tool(name, args))
        return {t.name for t in tools.tools}, results


def run_session(url, key, calls):
    return asyncio.run(_session_calls(url, key, calls))


def body(result) -> dict:
    """A tool result's JSON body (structured content, or the error envelope in the text)."""
    if result.is_error:
        # The SDK prefixes "Error executing tool <name>: " to the envelope.
        text = result.content[0].text
        return json.loads(text[text.index("{") :])
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


@pytest.fixture
def mcp_agent(transactional_db):
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write"])
    return agent, raw


def test_tools_session_store_recall_search_hydrate_forget(asgi_server, mcp_agent):
    agent, raw = mcp_agent
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


def test_key_of_another_tenant_sees_nothing(asgi_server, mcp_agent):
    agent, raw = mcp_agent
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

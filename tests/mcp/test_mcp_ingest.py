"""MCP `memory_ingest` (docs/api.md#mcp) over the real streamable HTTP transport: the REST ingest's
service, validation and errors, and background formation behind it."""

from __future__ import annotations

import httpx
import pytest
from rest_framework.test import APIClient

from memories.formation.ingest import DISABLED_REASON
from memories.models import ExtractionRun, Memory, Message, Thread
from tests.factories import make_agent, make_key, make_tenant
from tests.support.mcp import GITHUB_TOKEN, body, run_session

CONVERSATION = [
    {"role": "user", "content": "I am vegetarian", "created_at": "2026-05-01T10:00:00Z"},
    {"role": "assistant", "content": "Noted!", "created_at": "2026-05-01T10:00:01Z"},
]


@pytest.fixture
def ingest_agent(transactional_db, settings):
    settings.MEMORYHUB_LLM_URL = ""
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, raw = make_key(agent, scopes=["read", "write"])
    return agent, raw


def test_ingest_stores_the_conversation_like_rest_and_resends_are_duplicates(
    asgi_server, ingest_agent
):
    _agent, raw = ingest_agent
    pasted = {"role": "user", "content": f"deploy with {GITHUB_TOKEN}"}
    _, results = run_session(
        asgi_server,
        raw,
        [
            (
                "memory_ingest",
                {"thread_id": "t-1", "messages": [*CONVERSATION, pasted], "subject_id": "u1"},
            ),
            ("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION, "subject_id": "u1"}),
        ],
    )
    first, again = map(body, results)
    assert first == {
        "ok": True,
        "thread_id": "t-1",
        "accepted": 3,
        "duplicates": 0,
        "redacted": 1,
        "extraction": {"state": "disabled", "reason": DISABLED_REASON},
    }
    assert (again["accepted"], again["duplicates"]) == (0, 2)
    # REST sees the same thread: the same messages are duplicates there too.
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    resent = rest.post(
        "/api/v1/threads/t-1/messages",
        {"messages": CONVERSATION, "subject_id": "u1"},
        format="json",
    )
    assert (resent.json()["accepted"], resent.json()["duplicates"]) == (0, 2)
    listed = rest.get("/api/v1/threads/t-1/messages?subject_id=u1").json()["messages"]
    assert [m["content"] for m in listed] == [
        "I am vegetarian",
        "Noted!",
        "deploy with [redacted:github_token]",
    ]
    assert GITHUB_TOKEN not in str(list(Message.objects.values()))


def test_ingest_refuses_what_rest_refuses(asgi_server, ingest_agent):
    agent, raw = ingest_agent
    _, reader = make_key(agent, scopes=["read"])
    _, results = run_session(
        asgi_server,
        raw,
        [
            (
                "memory_ingest",
                {"thread_id": "t-1", "messages": [{"role": "robot", "content": "x"}]},
            ),
            ("memory_ingest", {"thread_id": "t-1", "messages": []}),
            ("memory_ingest", {"thread_id": f"t-{GITHUB_TOKEN}", "messages": CONVERSATION}),
            ("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION, "extract": "later"}),
            ("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION, "mood": "happy"}),
        ],
    )
    role, empty, secret, extract, unknown = (body(r) for r in results)
    assert all(r.is_error for r in results)
    assert role["error"] == {
        "code": "INVALID_INPUT",
        "message": "'messages[0].role' must be one of user, assistant, system, tool",
        "details": {"field": "messages[0].role"},
    }
    assert empty["error"]["details"] == {"field": "messages"}
    assert secret["error"]["code"] == "SECRET_REJECTED"
    assert secret["error"]["details"]["field"] == "thread_id"
    assert GITHUB_TOKEN not in results[2].content[0].text
    assert extract["error"]["code"] == "INVALID_INPUT"
    assert extract["error"]["details"]["field"] == "extract"
    assert unknown["error"] == {
        "code": "INVALID_INPUT",
        "message": "Unknown field 'mood'",
        "details": {"field": "mood"},
    }
    _, results = run_session(
        asgi_server, reader, [("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION})]
    )
    assert body(results[0])["error"] == {
        "code": "SCOPE_DENIED",
        "message": "This key lacks the 'write' scope",
        "details": {"scope": "write"},
    }
    _, bound = make_key(agent, subject_id="alice")
    _, results = run_session(
        asgi_server,
        bound,
        [("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION, "subject_id": "bob"})],
    )
    assert body(results[0])["error"]["code"] == "SCOPE_DENIED"
    assert not Message.objects.exists() and not Thread.objects.exists()


def test_threads_of_another_tenant_or_agent_stay_apart(asgi_server, ingest_agent):
    agent, raw = ingest_agent
    run_session(
        asgi_server, raw, [("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION})]
    )
    _, foreign = make_key(make_agent(make_tenant("globex"), "support-bot"))
    _, colleague = make_key(make_agent(agent.tenant, "other-bot"))
    for key in (foreign, colleague):
        _, results = run_session(
            asgi_server, key, [("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION})]
        )
        # Not duplicates: each agent's thread is its own.
        assert (body(results[0])["accepted"], body(results[0])["duplicates"]) == (2, 0)
    assert Thread.objects.count() == 3
    assert Message.objects.filter(thread__agent=agent).count() == 2
    # Through REST, another tenant's key sees only its own thread; the colleague's is hidden.
    rest = APIClient()
    rest.credentials(HTTP_AUTHORIZATION=f"Bearer {foreign}")
    assert rest.get("/api/v1/threads/t-1").json()["thread"]["message_count"] == 2
    assert rest.get("/api/v1/threads/t-2").status_code == 404


def test_extract_now_forms_memories_in_the_background(asgi_server, ingest_agent, fake_llm):
    _agent, raw = ingest_agent
    fake_llm.queue_json(
        {
            "operations": [
                {
                    "op": "add",
                    "text": "The user is vegetarian",
                    "key": None,
                    "category": "core",
                    "kind": "fact",
                    "tags": [],
                    "confidence": 0.95,
                    "mentions": [],
                    "occurred_at": None,
                    "evidence": [1],
                }
            ]
        }
    )
    _, results = run_session(
        asgi_server,
        raw,
        [("memory_ingest", {"thread_id": "t-1", "messages": CONVERSATION, "extract": "now"})],
    )
    assert body(results[0])["extraction"] == {"state": "queued"}
    # The test cluster runs tasks synchronously, at the commit of the call that queued them.
    run = ExtractionRun.objects.get()
    assert (run.trigger, run.state) == ("now", "done")
    assert "[1] user: I am vegetarian" in fake_llm.last_request.prompt
    memory = Memory.objects.get()
    assert (memory.text, memory.capture_mode) == ("The user is vegetarian", "inferred")
    assert memory.evidence == {"thread_id": "t-1", "messages": [1], "run_id": run.pk}


def test_an_oversized_mcp_body_is_refused_before_anything_runs(asgi_server, ingest_agent, settings):
    settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES = 2_000
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1_000
    _, raw = ingest_agent
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "memory_ingest",
            "arguments": {"thread_id": "t", "messages": [{"role": "user", "content": "x" * 3000}]},
        },
    }
    response = httpx.post(
        f"{asgi_server}/mcp",
        json=request,
        headers={"Authorization": f"Bearer {raw}", "Accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 413
    # /mcp keeps MEMORYHUB_MAX_BODY_BYTES; the larger messages limit is REST's messages path's.
    assert response.json()["error"] == {
        "code": "PAYLOAD_TOO_LARGE",
        "message": "Request body is too large",
        "details": {"limit_bytes": 1_000},
    }
    assert not Message.objects.exists()

"""Conversations over REST (docs/formation.md#endpoints): messages in and out, the thread and its
extraction state, `/extract`, `/end` with its last extraction; scopes, hidden threads,
idempotency."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.test import override_settings

from accounts.principal import Principal
from memories.formation.ingest import DISABLED_REASON, thread_messages_add
from memories.formation.runs import run_request
from memories.models import ExtractionRun, Memory, Message, RunState, Thread
from tests.factories import make_agent

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
T0_ISO = "2026-05-01T12:00:00.000000Z"
TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
THREAD_NOT_FOUND = (
    b'{"ok":false,"error":{"code":"NOT_FOUND","message":"No such thread","details":{}}}'
)


def post_messages(client, thread_id="t-1", *, headers=None, **body):
    return client.post(
        f"/api/v1/threads/{thread_id}/messages", body, format="json", **(headers or {})
    )


def turns(*contents):
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": c}
        for i, c in enumerate(contents)
    ]


def error(code, message, **details):
    return {"ok": False, "error": {"code": code, "message": message, "details": details}}


def add_op(text, evidence):
    return {
        "op": "add",
        "text": text,
        "key": None,
        "category": "core",
        "kind": "fact",
        "tags": [],
        "confidence": 0.95,
        "mentions": [],
        "occurred_at": None,
        "evidence": evidence,
    }


@pytest.fixture
def no_llm(settings):
    settings.MEMORYHUB_LLM_URL = ""


# --- POST /threads/{id}/messages -------------------------------------------------------------


@pytest.mark.django_db
def test_messages_are_accepted_with_counts_and_a_resend_is_all_duplicates(api_client, no_llm):
    messages = [
        {"role": "user", "content": "I moved to Lisbon", "created_at": "2026-05-01T11:00:00Z"},
        {"role": "assistant", "content": "Nice!", "name": "helper", "created_at": 1777633201000},
        {"role": "user", "content": f"my token is {TOKEN}"},
    ]
    response = post_messages(api_client, messages=messages, subject_id="u1")
    assert response.status_code == 202
    assert response.json() == {
        "ok": True,
        "thread_id": "t-1",
        "accepted": 3,
        "duplicates": 0,
        "redacted": 1,
        "extraction": {"state": "disabled", "reason": DISABLED_REASON},
    }
    again = post_messages(api_client, messages=messages, subject_id="u1")
    assert again.json()["accepted"] == 0 and again.json()["duplicates"] == 3
    assert Message.objects.count() == 3
    assert TOKEN not in str(list(Message.objects.values()))


@pytest.mark.django_db
def test_auto_schedules_and_now_queues_a_run_that_forms_memories(
    api_client, fake_llm, django_capture_on_commit_callbacks
):
    with time_machine.travel(T0, tick=False):
        scheduled = post_messages(api_client, messages=turns("I am vegetarian"))
    assert scheduled.status_code == 202
    assert scheduled.json()["extraction"] == {
        "state": "scheduled",
        "due_at": "2026-05-01T12:02:00.000000Z",
    }
    fake_llm.queue_json({"operations": [add_op("The user is vegetarian", [1])]})
    with django_capture_on_commit_callbacks(execute=True):
        queued = post_messages(api_client, messages=turns("Noted"), extract="now")
    assert queued.json()["extraction"] == {"state": "queued"}
    assert "[1] user: I am vegetarian" in fake_llm.last_request.prompt
    run = ExtractionRun.objects.get()
    assert (run.trigger, run.state) == ("now", RunState.DONE)
    assert Memory.objects.get().text == "The user is vegetarian"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "messages", "'messages' must be a list of 1–100 messages"),
        ({"messages": []}, "messages", "'messages' must be a list of 1–100 messages"),
        (
            {"messages": [{"role": "user", "content": "x"}] * 101},
            "messages",
            "'messages' must be a list of 1–100 messages",
        ),
        (
            {"messages": [{"role": "robot", "content": "x"}]},
            "messages[0].role",
            "'messages[0].role' must be one of user, assistant, system, tool",
        ),
        (
            {"messages": [{"role": "user", "content": " "}]},
            "messages[0].content",
            "'messages[0].content' must be a non-empty string",
        ),
        (
            {"messages": [{"role": "user", "content": "x" * 32001}]},
            "messages[0].content",
            "'messages[0].content' is longer than 32000 characters",
        ),
        ({"messages": turns("x"), "extract": "later"}, "extract", None),
        ({"messages": turns("x"), "colour": "red"}, "colour", "Unknown field 'colour'"),
        ({"messages": turns("x"), "subject_id": 7}, "subject_id", "'subject_id' must be a string"),
    ],
)
def test_bad_bodies_are_400_naming_the_field(api_client, body, field, message):
    response = post_messages(api_client, **body)
    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert details["field"] == field
    if message is not None:
        assert response.json() == error("INVALID_INPUT", message, field=field)
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_malformed_json_and_a_secret_in_the_thread_id(api_client):
    raw = api_client.post(
        "/api/v1/threads/t-1/messages", data="{nope", content_type="application/json"
    )
    assert raw.status_code == 400
    assert raw.json() == error("INVALID_INPUT", "Malformed JSON body", field="body")
    secret = post_messages(api_client, thread_id=f"t-{TOKEN}", messages=turns("x"))
    assert secret.status_code == 422
    assert secret.json()["error"]["code"] == "SECRET_REJECTED"
    assert secret.json()["error"]["details"]["field"] == "thread_id"
    assert TOKEN not in secret.content.decode()
    assert not Thread.objects.exists()


@pytest.mark.django_db
def test_a_full_batch_of_the_longest_messages_fits_the_body_limit(api_client, no_llm):
    # 100 × 32,000 characters, written as \\uXXXX escapes (json.dumps' default): ~19 MB, far
    # over the 1 MiB limit of the other endpoints.
    content = "é" * 32_000
    body = json.dumps(
        {"messages": [{"role": "user", "content": content, "created_at": i} for i in range(100)]}
    )
    assert len(body) > 19_000_000
    response = api_client.post(
        "/api/v1/threads/big/messages", data=body, content_type="application/json"
    )
    assert response.status_code == 202, response.content[:300]
    assert response.json()["accepted"] == 100
    # Other endpoints keep their limit.
    store = api_client.post(
        "/api/v1/memories",
        data=json.dumps({"text": "x" * 2_000_000}),
        content_type="application/json",
    )
    assert store.status_code == 413
    assert store.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"


@pytest.mark.django_db
@override_settings(MEMORYHUB_MAX_MESSAGES_BODY_BYTES=5000, DATA_UPLOAD_MAX_MEMORY_SIZE=1000)
def test_over_the_messages_limit_is_413(api_client):
    response = post_messages(api_client, messages=turns("x" * 6000))
    assert response.status_code == 413
    assert response.json() == error(
        "PAYLOAD_TOO_LARGE", "Request body is too large", limit_bytes=5000
    )
    assert post_messages(api_client, messages=turns("x" * 2000)).status_code == 202


@pytest.mark.django_db
def test_idempotency_key_replays_and_refuses_another_body(api_client, no_llm):
    headers = {"HTTP_IDEMPOTENCY_KEY": "batch-1"}
    first = post_messages(api_client, headers=headers, messages=turns("hello"))
    replay = post_messages(api_client, headers=headers, messages=turns("hello"))
    assert first.status_code == replay.status_code == 202
    assert replay.content == first.content
    assert first.json()["accepted"] == 1  # not "duplicates: 1": the first answer, replayed
    other = post_messages(api_client, headers=headers, messages=turns("bye"))
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    elsewhere = post_messages(api_client, thread_id="t-2", headers=headers, messages=turns("hello"))
    assert elsewhere.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    assert Message.objects.count() == 1


# --- GET /threads/{id} and its messages ---------------------------------------------------------


@pytest.mark.django_db
def test_the_thread_is_read_whole(api_client, fake_llm):
    with time_machine.travel(T0, tick=False):
        post_messages(api_client, messages=turns("hi", "hello"), subject_id="u1", extract="off")
    response = api_client.get("/api/v1/threads/t-1?subject_id=u1")
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "thread": {
            "thread_id": "t-1",
            "subject_id": "u1",
            "message_count": 2,
            "summary": "",
            "last_message_at": T0_ISO,
            "ended_at": None,
            "extraction": {
                "state": "idle",
                "due_at": None,
                "last_run_at": None,
                "pending_messages": 2,
                "memories_added": 0,
                "memories_updated": 0,
            },
        },
    }


def _state(client, thread_id="t-1"):
    return client.get(f"/api/v1/threads/{thread_id}").json()["thread"]["extraction"]


@pytest.mark.django_db
def test_extraction_state_follows_the_thread(api_client, agent, tenant, fake_llm, settings):
    principal = Principal(tenant=tenant, agent=agent)
    with time_machine.travel(T0, tick=False):
        post_messages(api_client, messages=turns("I live in Lisbon"))
    assert _state(api_client) == {
        "state": "scheduled",
        "due_at": "2026-05-01T12:02:00.000000Z",
        "last_run_at": None,
        "pending_messages": 1,
        "memories_added": 0,
        "memories_updated": 0,
    }
    thread = Thread.objects.get()
    run = run_request(thread=thread, trigger="extract")  # not executed: no commit in this test
    assert _state(api_client)["state"] == "queued"
    ExtractionRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING)
    assert _state(api_client)["state"] == "running"
    ExtractionRun.objects.filter(pk=run.pk).update(state=RunState.FAILED)
    assert _state(api_client)["state"] == "failed"  # and its message still waits
    Thread.objects.update(extracted_seq=1, last_run_at=T0, memories_added=2)
    ExtractionRun.objects.filter(pk=run.pk).update(state=RunState.DONE)
    done = _state(api_client)
    assert (done["state"], done["pending_messages"], done["last_run_at"]) == ("done", 0, T0_ISO)
    assert done["memories_added"] == 2
    thread_messages_add(principal=principal, thread_id="t-1", data={"messages": turns("x")}, now=T0)
    Thread.objects.update(extraction_due_at=T0 + timedelta(days=1))
    ExtractionRun.objects.create(
        tenant=tenant, thread=thread, agent=agent, trigger="schedule", state=RunState.DEFERRED
    )
    assert _state(api_client)["state"] == "deferred"
    agent.extraction = "off"
    agent.save()
    assert _state(api_client)["state"] == "off"
    settings.MEMORYHUB_LLM_URL = ""
    assert _state(api_client)["state"] == "disabled"


@pytest.mark.django_db
def test_messages_are_paged_in_seq_order(api_client, no_llm):
    with time_machine.travel(T0, tick=False):
        post_messages(
            api_client,
            messages=[
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": "two", "name": "bot"},
                {"role": "user", "content": f"three {TOKEN}"},
                {"role": "tool", "content": "four", "created_at": "2026-04-30T10:00:00Z"},
                {"role": "system", "content": "five"},
            ],
        )
    first = api_client.get("/api/v1/threads/t-1/messages?limit=2")
    assert first.status_code == 200
    body = first.json()
    assert body == {
        "ok": True,
        "messages": [
            {
                "seq": 1,
                "role": "user",
                "content": "one",
                "name": None,
                "created_at": T0_ISO,
                "redactions": [],
            },
            {
                "seq": 2,
                "role": "assistant",
                "content": "two",
                "name": "bot",
                "created_at": T0_ISO,
                "redactions": [],
            },
        ],
        "next_cursor": body["next_cursor"],
    }
    second = api_client.get(f"/api/v1/threads/t-1/messages?limit=2&cursor={body['next_cursor']}")
    page = second.json()["messages"]
    assert [m["seq"] for m in page] == [3, 4]
    assert page[0]["content"] == "three [redacted:github_token]"
    assert page[0]["redactions"] == ["github_token"]
    assert page[1]["created_at"] == "2026-04-30T10:00:00.000000Z"
    last = api_client.get(
        f"/api/v1/threads/t-1/messages?limit=2&cursor={second.json()['next_cursor']}"
    ).json()
    assert ([m["seq"] for m in last["messages"]], last["next_cursor"]) == ([5], None)
    everything = api_client.get("/api/v1/threads/t-1/messages").json()
    assert len(everything["messages"]) == 5 and everything["next_cursor"] is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("query", "field"),
    [("cursor=nope", "cursor"), ("cursor=WyJ4Il0", "cursor"), ("limit=0", "limit"),
     ("limit=201", "limit"), ("limit=ten", "limit")],
)  # fmt: skip
def test_bad_paging_is_400_naming_the_field(api_client, no_llm, query, field):
    post_messages(api_client, messages=turns("x"))
    response = api_client.get(f"/api/v1/threads/t-1/messages?{query}")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["field"] == field


# --- who may see and do what ------------------------------------------------------------------


@pytest.fixture
def hidden_threads(key_client, tenant, other_tenant, agent):
    """Thread `t-hidden` of another tenant's agent, another agent of the tenant, and of this
    agent for subject u2; `api_client`'s agent has no subject-less nor u1 thread of that id."""
    for client, subject in (
        (key_client(make_agent(other_tenant, "support-bot")), None),
        (key_client(make_agent(tenant, "private-bot")), None),
        (key_client(agent), "u2"),
    ):
        response = post_messages(
            client, thread_id="t-hidden", messages=turns("secret plans"), subject_id=subject
        )
        assert response.status_code == 202


HIDDEN_REQUESTS = [
    ("get", "/api/v1/threads/{id}"),
    ("get", "/api/v1/threads/{id}/messages"),
    ("post", "/api/v1/threads/{id}/extract"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url"), HIDDEN_REQUESTS)
@pytest.mark.parametrize("thread_id", ["t-hidden", "t-missing"])
@pytest.mark.parametrize("subject", [None, "u1"])
def test_a_thread_the_key_may_not_see_is_the_same_404(
    api_client, hidden_threads, method, url, thread_id, subject, no_llm
):
    path = url.format(id=thread_id) + (f"?subject_id={subject}" if subject else "")
    response = getattr(api_client, method)(path)
    assert response.status_code == 404
    assert response.content == THREAD_NOT_FOUND


@pytest.mark.django_db
def test_a_subject_bound_key_acts_for_its_subject_only(key_client, agent, no_llm):
    alice = key_client(agent, subject_id="alice")
    assert post_messages(alice, messages=turns("hi")).json()["accepted"] == 1
    assert Thread.objects.get().subject_id == "alice"
    assert alice.get("/api/v1/threads/t-1").json()["thread"]["subject_id"] == "alice"
    for response in (
        alice.get("/api/v1/threads/t-1?subject_id=bob"),
        post_messages(alice, messages=turns("x"), subject_id="bob"),
        alice.post("/api/v1/threads/t-1/extract?subject_id=bob"),
        alice.post("/api/v1/threads/t-1/end?subject_id=bob"),
    ):
        assert response.status_code == 403
        assert response.json() == error(
            "SCOPE_DENIED", "This key is bound to another subject", field="subject_id"
        )


@pytest.mark.django_db
def test_scopes(key_client, agent, api_client, no_llm):
    post_messages(api_client, messages=turns("x"))
    reader = key_client(agent, scopes=["read"])
    for response in (
        post_messages(reader, messages=turns("y")),
        reader.post("/api/v1/threads/t-1/extract"),
        reader.post("/api/v1/threads/t-1/end"),
    ):
        assert response.status_code == 403
        assert response.json() == error(
            "SCOPE_DENIED", "This key lacks the 'write' scope", scope="write"
        )
    assert reader.get("/api/v1/threads/t-1").status_code == 200
    assert reader.get("/api/v1/threads/t-1/messages").status_code == 200
    writer = key_client(agent, scopes=["write"])
    assert writer.get("/api/v1/threads/t-1").json() == error(
        "SCOPE_DENIED", "This key lacks the 'read' scope", scope="read"
    )
    assert post_messages(writer, messages=turns("z")).status_code == 202
    assert Message.objects.count() == 2


# --- POST /threads/{id}/extract ---------------------------------------------------------------


@pytest.mark.django_db
def test_extract_queues_a_run_once_and_says_why_when_it_does_not(
    api_client, agent, fake_llm, settings, django_capture_on_commit_callbacks
):
    post_messages(api_client, messages=turns("I am vegetarian"), extract="off")
    fake_llm.queue_json({"operations": [add_op("The user is vegetarian", [1])]})
    with django_capture_on_commit_callbacks(execute=True):
        response = api_client.post("/api/v1/threads/t-1/extract")
    run = ExtractionRun.objects.get()
    assert response.status_code == 202
    assert response.json() == {
        "ok": True,
        "thread_id": "t-1",
        "extraction": {"state": "queued", "run_id": run.pk},
    }
    assert run.trigger == "extract"
    run.refresh_from_db()
    assert run.state == RunState.DONE and len(fake_llm.requests) == 1
    assert api_client.post("/api/v1/threads/t-1/extract").json()["extraction"] == {
        "state": "idle",
        "reason": "No messages wait for extraction",
    }
    post_messages(api_client, messages=turns("and I hate cilantro"), extract="off")
    agent.extraction = "off"
    agent.save()
    assert api_client.post("/api/v1/threads/t-1/extract").json()["extraction"] == {
        "state": "off",
        "reason": "Extraction is off for this agent",
    }
    settings.MEMORYHUB_LLM_URL = ""
    assert api_client.post("/api/v1/threads/t-1/extract").json()["extraction"] == {
        "state": "disabled",
        "reason": DISABLED_REASON,
    }
    assert ExtractionRun.objects.count() == 1


@pytest.mark.django_db
def test_extract_twice_gives_the_open_run_and_replays_with_a_key(api_client, fake_llm):
    post_messages(api_client, messages=turns("hello"), extract="off")
    first = api_client.post("/api/v1/threads/t-1/extract", HTTP_IDEMPOTENCY_KEY="x-1")
    second = api_client.post("/api/v1/threads/t-1/extract")  # the first is still queued
    replay = api_client.post("/api/v1/threads/t-1/extract", HTTP_IDEMPOTENCY_KEY="x-1")
    run = ExtractionRun.objects.get()
    assert first.json()["extraction"] == second.json()["extraction"]
    assert first.json()["extraction"] == {"state": "queued", "run_id": run.pk}
    assert replay.content == first.content


# --- POST /threads/{id}/end -------------------------------------------------------------------


@pytest.mark.django_db
def test_end_runs_a_last_extraction_then_removes_conversation_memories(
    api_client, fake_llm, django_capture_on_commit_callbacks
):
    api_client.post(
        "/api/v1/memories",
        {"text": "turn note", "category": "conversation", "thread_id": "t-1"},
        format="json",
    )
    post_messages(api_client, messages=turns("I am vegetarian", "Noted"), extract="off")
    fake_llm.queue_json({"operations": [add_op("The user is vegetarian", [1])]})
    with time_machine.travel(T0, tick=False), django_capture_on_commit_callbacks(execute=True):
        response = api_client.post("/api/v1/threads/t-1/end")
    assert response.status_code == 200
    assert response.json() == {"ok": True, "removed": 1}
    assert len(fake_llm.requests) == 1
    assert "[1] user: I am vegetarian" in fake_llm.last_request.prompt
    run = ExtractionRun.objects.get()
    assert (run.trigger, run.state, run.from_seq, run.to_seq) == ("end", "done", 1, 2)
    formed = Memory.objects.get(capture_mode="inferred")
    assert formed.evidence == {"thread_id": "t-1", "messages": [1], "run_id": run.pk}
    thread = api_client.get("/api/v1/threads/t-1").json()["thread"]
    assert thread["ended_at"] == T0_ISO
    assert (thread["extraction"]["state"], thread["extraction"]["pending_messages"]) == ("done", 0)
    # Ending again extracts nothing more and keeps the first end time.
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert api_client.post("/api/v1/threads/t-1/end").json() == {"ok": True, "removed": 0}
    assert ExtractionRun.objects.count() == 1
    assert Thread.objects.get().ended_at == T0
    # New messages reopen it.
    post_messages(api_client, messages=turns("one more thing"), extract="off")
    assert api_client.get("/api/v1/threads/t-1").json()["thread"]["ended_at"] is None


@pytest.mark.django_db
def test_end_without_an_llm_or_with_extraction_off_only_ends(api_client, agent, settings):
    settings.MEMORYHUB_LLM_URL = ""
    post_messages(api_client, messages=turns("hello"))
    with time_machine.travel(T0, tick=False):
        assert api_client.post("/api/v1/threads/t-1/end").json() == {"ok": True, "removed": 0}
    assert not ExtractionRun.objects.exists()
    assert Thread.objects.get().ended_at == T0


@pytest.mark.django_db
def test_end_leaves_other_agents_tenants_and_subjects_alone(
    api_client, key_client, agent, hidden_threads, no_llm
):
    bound = key_client(agent, subject_id="u3")
    post_messages(bound, thread_id="t-hidden", messages=turns("mine"))
    assert bound.post("/api/v1/threads/t-hidden/end").json() == {"ok": True, "removed": 0}
    ended = Thread.objects.filter(ended_at__isnull=False).values_list(
        "agent__tenant__slug", "agent__slug", "subject_id"
    )
    assert list(ended) == [("acme", "support-bot", "u3")]
    # An unbound key without a subject ends its agent's thread of that id for every subject.
    api_client.post("/api/v1/threads/t-hidden/end")
    still_open = Thread.objects.filter(ended_at__isnull=True)
    assert sorted((t.agent.tenant.slug, t.agent.slug) for t in still_open) == [
        ("acme", "private-bot"),
        ("globex", "support-bot"),
    ]

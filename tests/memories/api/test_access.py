"""Who may see and change what: tenants, agents, subjects, shared reads and key scopes."""

from __future__ import annotations

import pytest

from memories.ids import new_memory_id
from memories.models import Memory
from tests.factories import make_agent

NOT_FOUND = b'{"ok":false,"error":{"code":"NOT_FOUND","message":"No such memory","details":{}}}'


def _store(client, **body):
    response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["memory_id"]


@pytest.fixture
def hidden_ids(key_client, tenant, other_tenant, api_client):
    """Ids the `api_client` agent must not see, each for a different reason."""
    foreign_agent = make_agent(other_tenant, "support-bot")
    private_agent = make_agent(tenant, "private-bot")
    return {
        "other tenant": _store(key_client(foreign_agent), text="globex secret plan", key="k"),
        "other agent": _store(key_client(private_agent), text="private note", key="k"),
        "other subject": _store(api_client, text="about u2", key="k", subject_id="u2"),
        # User memories: another subject's, stored by another agent or by this
        # one, and the same subject id's in another tenant; none is seen without its subject.
        "other subject's user memory": _store(
            key_client(private_agent), text="u2 is vegan", key="k", subject_id="u2", scope="user"
        ),
        "own user memory of another subject": _store(
            api_client, text="u3 is allergic", key="k2", subject_id="u3", scope="user"
        ),
        "other tenant's user memory": _store(
            key_client(foreign_agent), text="u1 at globex", key="k", subject_id="u1", scope="user"
        ),
        "random id": new_memory_id(),
        "not an id": "mem_nope",
    }


ENDPOINTS = [
    ("get", "/api/v1/memories/{id}", None),
    ("patch", "/api/v1/memories/{id}", {"text": "overwrite"}),
    ("delete", "/api/v1/memories/{id}", None),
    ("post", "/api/v1/memories/{id}/confirm", None),
    ("delete", "/api/v1/memories/{id}?purge=true", None),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "url", "body"), ENDPOINTS)
def test_every_hidden_memory_is_the_same_404(
    api_client, key_client, agent, hidden_ids, method, url, body
):
    client = key_client(agent, scopes=["read", "write", "admin"])
    for reason, memory_id in hidden_ids.items():
        response = getattr(client, method)(url.format(id=memory_id), body, format="json")
        assert response.status_code == 404, reason
        assert response.content == NOT_FOUND, reason
    # Nothing hidden was touched.
    assert set(Memory.objects.values_list("status", flat=True)) == {"active"}
    assert set(Memory.objects.values_list("version", flat=True)) == {1}


@pytest.mark.django_db
def test_by_key_reads_and_forgets_see_nothing_hidden(api_client, hidden_ids):
    recall = api_client.get("/api/v1/memories/by-key/k")
    assert recall.content == b'{"ok":true,"memory":null}'
    assert api_client.get("/api/v1/memories/by-key/k?subject_id=u1").json() == {
        "ok": True,
        "memory": None,
    }
    forget = api_client.delete("/api/v1/memories/by-key/k")
    assert forget.json() == {"ok": True, "deleted": False, "memory_id": None}
    assert api_client.get("/api/v1/keys").json() == {"ok": True, "keys": []}
    listed = api_client.get("/api/v1/memories").json()
    assert listed == {"ok": True, "memories": [], "next_cursor": None, "as_of": listed["as_of"]}
    # The subject itself sees its memories: the agent's own wins over the subject's user one.
    mine = api_client.get("/api/v1/memories/by-key/k?subject_id=u2").json()
    assert mine["memory"]["id"] == hidden_ids["other subject"]
    keys = api_client.get("/api/v1/keys?subject_id=u1").json()
    assert keys == {"ok": True, "keys": []}  # globex's u1 is another tenant's subject


USER_READS = [
    ("get", "/api/v1/memories/{id}{q}"),
    ("list", "/api/v1/memories{q}"),
    ("recall", "/api/v1/memories/by-key/allergy{q}"),
    ("keys", "/api/v1/keys{q}"),
    ("search", "/api/v1/search"),
    ("hydrate", "/api/v1/hydrate"),
    ("export", "/api/v1/export.md{q}"),
    ("events", "/api/v1/events{q}"),
]


def _sees(client, memory_id: str, how: str, url: str, subject: str | None) -> bool:
    """Whether `client`, acting for `subject` (None: no subject), reads the memory `how`."""
    q = f"?subject_id={subject}" if subject else ""
    body = {"subject_id": subject} if subject else {}
    if how == "search":
        hits = client.post(url, {"query": "peanuts", **body}, format="json").json()["memories"]
        return memory_id in [hit["id"] for hit in hits]
    if how == "hydrate":
        entries = client.post(url, body, format="json").json()["entries"]
        return memory_id in [entry["id"] for entry in entries]
    response = client.get(url.format(id=memory_id, q=q))
    if how == "get":
        return response.status_code == 200
    if how == "export":
        return memory_id in response.getvalue().decode()
    payload = response.json()
    if how == "list":
        return memory_id in [m["id"] for m in payload["memories"]]
    if how == "recall":
        return (payload["memory"] or {}).get("id") == memory_id
    if how == "events":
        return memory_id in [event["memory_id"] for event in payload["events"]]
    return "allergy" in payload["keys"]


@pytest.mark.django_db
@pytest.mark.parametrize(("how", "url"), USER_READS)
def test_a_user_memory_is_its_subjects_across_agents_and_nobody_elses(
    key_client, tenant, other_tenant, agent, how, url
):
    """A user memory is visible to a second agent acting for the subject (by `subject_id` or by a
    key bound to it), invisible to every other subject, to no-subject requests and to other tenants
    (the same subject id there included)."""
    writer = key_client(agent)
    memory_id = _store(
        writer, text="Ann is allergic to peanuts", key="allergy", subject_id="ann", scope="user"
    )
    second = make_agent(tenant, "billing-bot")
    assert _sees(key_client(second), memory_id, how, url, "ann")
    assert _sees(key_client(second, subject_id="ann"), memory_id, how, url, None)
    assert _sees(writer, memory_id, how, url, "ann")
    assert not _sees(key_client(second), memory_id, how, url, "bob")
    assert not _sees(key_client(second, subject_id="bob"), memory_id, how, url, None)
    assert not _sees(key_client(second), memory_id, how, url, None)
    foreign = make_agent(other_tenant, "support-bot")
    assert not _sees(key_client(foreign), memory_id, how, url, "ann")


@pytest.mark.django_db
def test_any_agent_acting_for_the_subject_may_change_its_user_memory(key_client, tenant, agent):
    memory_id = _store(key_client(agent), text="Ann prefers email", subject_id="ann", scope="user")
    second = key_client(make_agent(tenant, "billing-bot"))
    url = f"/api/v1/memories/{memory_id}"
    assert second.patch(url, {"text": "x"}, format="json").status_code == 404  # no subject
    assert second.patch(f"{url}?subject_id=bob", {"text": "x"}, format="json").status_code == 404
    changed = second.patch(f"{url}?subject_id=ann", {"text": "Ann prefers SMS"}, format="json")
    assert changed.status_code == 200 and changed.json()["memory"]["version"] == 2
    reader = key_client(make_agent(tenant, "read-bot"), scopes=["read"], subject_id="ann")
    assert reader.patch(url, {"text": "y"}, format="json").status_code == 403
    bound = key_client(make_agent(tenant, "sms-bot"), subject_id="ann")
    assert bound.delete(url).json() == {"ok": True, "deleted": True, "memory_id": memory_id}


@pytest.mark.django_db
def test_read_only_key_cannot_write(key_client, agent, api_client):
    memory_id = _store(api_client, text="fact", key="k")
    reader = key_client(agent, scopes=["read"])
    denied = {
        "ok": False,
        "error": {
            "code": "SCOPE_DENIED",
            "message": "This key lacks the 'write' scope",
            "details": {"scope": "write"},
        },
    }
    calls = [
        reader.post("/api/v1/memories", {"text": "x"}, format="json"),
        reader.patch(f"/api/v1/memories/{memory_id}", {"text": "y"}, format="json"),
        reader.delete(f"/api/v1/memories/{memory_id}"),
        reader.delete("/api/v1/memories/by-key/k"),
        reader.post(f"/api/v1/memories/{memory_id}/confirm"),
        reader.post("/api/v1/threads/t1/end"),
    ]
    for response in calls:
        assert response.status_code == 403
        assert response.json() == denied
    assert reader.get(f"/api/v1/memories/{memory_id}").status_code == 200
    assert Memory.objects.get().version == 1


@pytest.mark.django_db
def test_write_only_key_cannot_read(key_client, agent, api_client):
    memory_id = _store(api_client, text="fact", key="k")
    writer = key_client(agent, scopes=["write"])
    for url in (f"/api/v1/memories/{memory_id}", "/api/v1/memories/by-key/k", "/api/v1/keys"):
        response = writer.get(url)
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "SCOPE_DENIED"


@pytest.mark.django_db
def test_purge_needs_the_admin_scope(api_client, key_client, agent):
    memory_id = _store(api_client, text="fact")
    response = api_client.delete(f"/api/v1/memories/{memory_id}?purge=true")
    assert response.status_code == 403
    assert response.json()["error"]["details"] == {"scope": "admin"}
    admin = key_client(agent, scopes=["read", "write", "admin"])
    assert admin.delete(f"/api/v1/memories/{memory_id}?purge=true").json() == {
        "ok": True,
        "deleted": True,
        "memory_id": memory_id,
    }


@pytest.mark.django_db
def test_subject_isolation(api_client, key_client, agent):
    general = _store(api_client, text="Office closes at 6pm")
    ann = _store(api_client, text="Ann likes tea", subject_id="ann")
    bob = _store(api_client, text="Bob likes coffee", subject_id="bob")

    def ids(client, query=""):
        return {m["id"] for m in client.get(f"/api/v1/memories{query}").json()["memories"]}

    assert ids(api_client) == {general}
    assert ids(api_client, "?subject_id=ann") == {general, ann}
    assert api_client.get(f"/api/v1/memories/{ann}").status_code == 404
    assert api_client.get(f"/api/v1/memories/{ann}?subject_id=ann").status_code == 200
    assert api_client.get(f"/api/v1/memories/{ann}?subject_id=bob").status_code == 404

    bound = key_client(agent, subject_id="bob")
    assert ids(bound) == {general, bob}
    assert bound.get(f"/api/v1/memories/{ann}").status_code == 404
    other = bound.get("/api/v1/memories?subject_id=ann")
    assert other.status_code == 403
    assert other.json()["error"] == {
        "code": "SCOPE_DENIED",
        "message": "This key is bound to another subject",
        "details": {"field": "subject_id"},
    }
    # A bound key stores for its subject.
    stored = bound.post("/api/v1/memories", {"text": "Bob moved"}, format="json").json()
    assert stored["memory"]["subject_id"] == "bob"
    refused = bound.post("/api/v1/memories", {"text": "x", "subject_id": "ann"}, format="json")
    assert refused.status_code == 403


@pytest.mark.django_db
def test_shared_and_workspace_memories(api_client, key_client, tenant, agent):
    writer = make_agent(tenant, "writer-bot")
    writer_client = key_client(writer)
    shared = _store(writer_client, text="Price list updated", category="daily")
    _store(writer_client, text="chat", category="conversation", thread_id="t1")
    workspace = _store(writer_client, text="Company holiday on Friday", category="workspace")

    listed = api_client.get("/api/v1/memories").json()["memories"]
    assert [(m["id"], m["source"]) for m in listed] == [(workspace, "workspace")]

    agent.reads_from.add(writer)
    listed = api_client.get("/api/v1/memories").json()["memories"]
    assert [(m["id"], m["source"], m["agent"]) for m in listed] == [
        (workspace, "workspace", None),
        (shared, "shared:writer-bot", "writer-bot"),
    ]
    no_shared = api_client.get("/api/v1/memories?include_shared=false").json()["memories"]
    assert [m["id"] for m in no_shared] == [workspace]
    # Shared memories are read-only; workspace memories belong to every agent of the tenant.
    denied = api_client.patch(f"/api/v1/memories/{shared}", {"text": "x"}, format="json")
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "SCOPE_DENIED"
    assert api_client.delete(f"/api/v1/memories/{shared}").status_code == 403
    edited = api_client.patch(
        f"/api/v1/memories/{workspace}", {"text": "Holiday moved"}, format="json"
    )
    assert edited.status_code == 200


@pytest.mark.django_db
def test_unauthenticated_requests_get_one_body(client):
    for method, url in (("get", "/api/v1/memories"), ("post", "/api/v1/memories")):
        response = getattr(client, method)(url)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.django_db
def test_unknown_api_path_is_json_404(api_client):
    response = api_client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.django_db
def test_rate_limit_per_key(api_client, key_client, agent, settings):
    from django.core.cache import cache

    cache.clear()
    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 2
    assert api_client.get("/api/v1/keys").status_code == 200
    assert api_client.get("/api/v1/keys").status_code == 200
    limited = api_client.get("/api/v1/keys")
    assert limited.status_code == 429
    assert int(limited["Retry-After"]) > 0
    assert limited.json() == {
        "ok": False,
        "error": {"code": "RATE_LIMITED", "message": "Too many requests", "details": {}},
    }
    # Another key has its own budget.
    assert key_client(agent).get("/api/v1/keys").status_code == 200
    cache.clear()


@pytest.mark.django_db
def test_rate_limit_covers_search_hydrate_and_export(api_client, settings):
    from django.core.cache import cache

    cache.clear()
    settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = 1
    assert api_client.post("/api/v1/search", {"query": "x"}, format="json").status_code == 200
    for limited in (
        api_client.post("/api/v1/hydrate", {}, format="json"),
        api_client.post("/api/v1/search", {"query": "x"}, format="json"),
        api_client.get("/api/v1/export.md"),
    ):
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "RATE_LIMITED"
    cache.clear()


IDEMPOTENCY_MISMATCH = {
    "ok": False,
    "error": {
        "code": "IDEMPOTENCY_MISMATCH",
        "message": "This Idempotency-Key was used with a different body",
        "details": {},
    },
}


@pytest.mark.django_db
def test_idempotent_replays_go_only_to_the_key_that_earned_them(key_client, agent):
    ann, bob = key_client(agent, subject_id="ann"), key_client(agent, subject_id="bob")
    retry = {"HTTP_IDEMPOTENCY_KEY": "same-retry-key"}
    first = ann.post("/api/v1/memories", {"text": "Likes tea"}, format="json", **retry)
    assert first.status_code == 201
    assert first.json()["memory"]["subject_id"] == "ann"
    # Bob's key sends the very same body and header: never Ann's stored response.
    other = bob.post("/api/v1/memories", {"text": "Likes tea"}, format="json", **retry)
    assert (other.status_code, other.json()) == (422, IDEMPOTENCY_MISMATCH)
    assert list(Memory.objects.values_list("subject_id", flat=True)) == ["ann"]
    # Ann's own retry still replays byte for byte.
    again = ann.post("/api/v1/memories", {"text": "Likes tea"}, format="json", **retry)
    assert (again.status_code, again.content) == (201, first.content)

    # The same for the other idempotent POSTs: a confirm replay would hand Bob Ann's memory.
    url = f"/api/v1/memories/{first.json()['memory_id']}/confirm"
    confirm = {"HTTP_IDEMPOTENCY_KEY": "confirm-retry-key"}
    assert ann.post(url, **confirm).status_code == 200
    leaked = bob.post(url, **confirm)
    assert (leaked.status_code, leaked.json()) == (422, IDEMPOTENCY_MISMATCH)
    assert "Likes tea" not in leaked.content.decode()


@pytest.mark.django_db
def test_conversation_memories_stay_with_their_agent(key_client, tenant, agent, api_client):
    """The owner reads its conversation memories by id, key and list (a thread filter narrows);
    search and hydrate take them only for their thread; `reads_from` never exposes them."""
    writer = make_agent(tenant, "writer-bot")
    writer_client = key_client(writer)
    chat = _store(
        writer_client,
        text="Whispered in run r1",
        key="chat",
        category="conversation",
        thread_id="r1",
    )
    daily = _store(writer_client, text="Whispered daily note", key="note", category="daily")
    agent.reads_from.add(writer)

    def listed(client, query=""):
        return {m["id"] for m in client.get(f"/api/v1/memories{query}").json()["memories"]}

    def searched(client, **body):
        response = client.post("/api/v1/search", {"query": "whispered", **body}, format="json")
        return {hit["id"] for hit in response.json()["memories"]}

    def hydrated(client, **body):
        response = client.post("/api/v1/hydrate", body, format="json")
        return {entry["id"] for entry in response.json()["entries"]}

    # The owner.
    assert writer_client.get(f"/api/v1/memories/{chat}").status_code == 200
    assert writer_client.get("/api/v1/memories/by-key/chat").json()["memory"]["id"] == chat
    assert listed(writer_client) == {chat, daily}
    assert listed(writer_client, "?thread_id=r1") == {chat}
    assert listed(writer_client, "?thread_id=r2") == set()
    assert searched(writer_client) == {daily}
    assert searched(writer_client, thread_id="r1") == {chat}
    assert hydrated(writer_client) == {daily}
    assert hydrated(writer_client, thread_id="r1") == {chat, daily}

    # An agent that reads from the owner sees the daily note, never the conversation.
    assert api_client.get(f"/api/v1/memories/{chat}").content == NOT_FOUND
    assert api_client.get("/api/v1/memories/by-key/chat").json() == {"ok": True, "memory": None}
    assert api_client.get("/api/v1/memories/by-key/note").json()["memory"]["id"] == daily
    assert api_client.get("/api/v1/keys").json()["keys"] == ["note"]
    assert listed(api_client) == {daily}
    assert listed(api_client, "?thread_id=r1") == set()
    assert searched(api_client) == {daily}
    assert searched(api_client, thread_id="r1") == set()
    assert hydrated(api_client, thread_id="r1") == {daily}
    export = api_client.get("/api/v1/export.md")
    body = b"".join(export.streaming_content).decode()
    assert "Whispered daily note" in body and "Whispered in run r1" not in body
    # Nor can it end the owner's thread.
    assert api_client.post("/api/v1/threads/r1/end").json() == {"ok": True, "removed": 0}
    assert writer_client.get(f"/api/v1/memories/{chat}").status_code == 200

"""Read and change (docs/api.md#read, docs/api.md#change): get, recall, keys, list + cursor, PATCH,
confirm, TTL."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from accounts.principal import Principal
from memories import selectors
from memories.models import Memory, MemoryRevision
from memories.services.store import memory_store
from memories.visibility import visible_memories
from tests.factories import make_agent

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _store(client, **body):
    response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


@pytest.mark.django_db
def test_get_and_recall_bump_last_accessed(api_client):
    with time_machine.travel(T0, tick=False):
        memory_id = _store(api_client, text="Likes tea", key="drink")["memory_id"]
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        got = api_client.get(f"/api/v1/memories/{memory_id}")
        assert got.status_code == 200 and got["ETag"] == '"1"'
        assert got.json()["memory"]["id"] == memory_id
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        recalled = api_client.get("/api/v1/memories/by-key/drink").json()
        assert recalled["ok"] is True and recalled["memory"]["text"] == "Likes tea"
    memory = Memory.objects.get()
    assert memory.last_accessed_at == T0 + timedelta(hours=2)
    assert memory.access_count == 2
    assert memory.version == 1  # a read is not a change
    assert api_client.get("/api/v1/memories/by-key/none").json() == {"ok": True, "memory": None}


@pytest.mark.django_db
def test_keys_lists_visible_keys(api_client):
    _store(api_client, text="a", key="b.key")
    _store(api_client, text="b", key="a.key", category="daily")
    _store(api_client, text="c")
    _store(api_client, text="d", key="u.key", subject_id="u1")
    assert api_client.get("/api/v1/keys").json() == {"ok": True, "keys": ["a.key", "b.key"]}
    assert api_client.get("/api/v1/keys?category=daily").json()["keys"] == ["a.key"]
    assert api_client.get("/api/v1/keys?subject_id=u1").json()["keys"] == [
        "a.key",
        "b.key",
        "u.key",
    ]


@pytest.mark.django_db
def test_list_filters(api_client):
    a = _store(api_client, text="alpha", tags=["x", "y"], kind="note", category="daily")
    b = _store(api_client, text="beta", tags=["x"], thread_id="t1")
    c = _store(api_client, text="gamma", tags=["y"], category="archival")

    def ids(query):
        response = api_client.get(f"/api/v1/memories{query}")
        assert response.status_code == 200, response.content
        return [m["id"] for m in response.json()["memories"]]

    a, b, c = a["memory_id"], b["memory_id"], c["memory_id"]
    assert ids("") == [c, b, a]
    assert ids("?tag=x") == [b, a]
    assert ids("?tag=x&tag=y") == [a]
    assert ids("?category=daily") == [a]
    assert ids("?kind=note") == [a]
    assert ids("?thread_id=t1") == [b]
    updated = Memory.objects.get(pk=b).updated_at
    assert ids(f"?updated_after={updated.isoformat().replace('+00:00', 'Z')}") == [c]
    bad = api_client.get("/api/v1/memories?limit=500")
    assert bad.status_code == 400 and bad.json()["error"]["details"] == {"field": "limit"}
    bad = api_client.get("/api/v1/memories?cursor=garbage")
    assert bad.status_code == 400 and bad.json()["error"]["details"] == {"field": "cursor"}


@pytest.mark.django_db
def test_cursor_walk_returns_each_memory_once_while_rows_change(api_client):
    with time_machine.travel(T0, tick=False):
        # Several rows share one updated_at: the id breaks the tie.
        ids = [
            _store(api_client, text=f"fact {i}", dedup_policy="insert")["memory_id"]
            for i in range(7)
        ]
    with time_machine.travel(T0 + timedelta(minutes=1), tick=False):
        ids += [
            _store(api_client, text=f"later {i}", dedup_policy="insert")["memory_id"]
            for i in range(5)
        ]

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        query = "?limit=5" + (f"&cursor={cursor}" if cursor else "")
        body = api_client.get(f"/api/v1/memories{query}").json()
        seen += [m["id"] for m in body["memories"]]
        pages += 1
        if pages == 1:
            # Changes between pages: a new memory, a forgotten one, and two edits that move
            # rows to the head of the order (one already returned, one not yet).
            _store(api_client, text="brand new", dedup_policy="insert")
            api_client.delete(f"/api/v1/memories/{ids[0]}")
            for moved in (ids[1], seen[0]):
                edit = api_client.patch(
                    f"/api/v1/memories/{moved}", {"text": "edited"}, format="json"
                )
                assert edit.status_code == 200
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert len(seen) == len(set(seen))
    assert set(seen) == set(ids) - {ids[0]}
    created = [Memory.objects.get(pk=i).created_at for i in seen]
    assert created == sorted(created, reverse=True)  # never updated before the walk


@pytest.mark.django_db
def test_list_query_count_is_constant(api_client, django_assert_max_num_queries, tenant, agent):
    for i in range(30):
        _store(api_client, text=f"fact {i}", dedup_policy="insert")
    # The key, the walk's horizon (a first page only), the owners' statements and the moved one.
    with django_assert_max_num_queries(5):
        response = api_client.get("/api/v1/memories?limit=30")
    assert len(response.json()["memories"]) == 30


@pytest.mark.django_db
def test_patch_changes_only_given_fields(api_client):
    created = _store(api_client, text="Lives in Paris", tags=["home"], importance=0.3)
    memory_id = created["memory_id"]
    response = api_client.patch(
        f"/api/v1/memories/{memory_id}",
        {"text": "Lives in Lyon", "importance": 0.9, "tags": ["Home", "City"]},
        format="json",
    )
    assert response.status_code == 200
    assert response["ETag"] == '"2"'
    memory = response.json()["memory"]
    before = created["memory"]
    changed = {k for k in memory if memory[k] != before[k]}
    assert changed == {"text", "importance", "tags", "version", "updated_at", "size_bytes"}
    assert (memory["text"], memory["tags"], memory["version"]) == (
        "Lives in Lyon",
        ["home", "city"],
        2,
    )
    revision = MemoryRevision.objects.filter(memory_id=memory_id).latest("id")
    assert (revision.change_type, revision.before["text"], revision.after["text"]) == (
        "update",
        "Lives in Paris",
        "Lives in Lyon",
    )
    row = Memory.objects.get(pk=memory_id)
    assert row.content_hash == hashlib.sha256(b"lives in lyon").hexdigest()


@pytest.mark.django_db
def test_patch_compare_and_set_by_if_match(api_client):
    memory_id = _store(api_client, text="v1")["memory_id"]
    url = f"/api/v1/memories/{memory_id}"
    stale = api_client.patch(url, {"text": "x"}, format="json", HTTP_IF_MATCH='"7"')
    assert stale.status_code == 409
    assert stale.json()["error"]["details"] == {"current_version": 1}
    ok = api_client.patch(url, {"text": "v2"}, format="json", HTTP_IF_MATCH='"1"')
    assert ok.status_code == 200 and ok.json()["memory"]["version"] == 2
    for header in ("soon", '"99999999999"', '"²"'):
        bad = api_client.patch(url, {"text": "x"}, format="json", HTTP_IF_MATCH=header)
        assert bad.status_code == 400 and bad.json()["error"]["details"] == {"field": "If-Match"}
    stale_body = api_client.patch(url, {"text": "x", "expected_version": 1}, format="json")
    assert stale_body.status_code == 409


@pytest.mark.django_db
def test_patch_rejects_what_it_cannot_change(api_client):
    memory_id = _store(api_client, text="x")["memory_id"]
    url = f"/api/v1/memories/{memory_id}"
    assert api_client.patch(url, {"key": "k"}, format="json").json()["error"]["details"] == {
        "field": "key"
    }
    to_workspace = api_client.patch(url, {"category": "workspace"}, format="json")
    assert to_workspace.status_code == 400
    to_conversation = api_client.patch(url, {"category": "conversation"}, format="json")
    assert to_conversation.json()["error"]["details"] == {"field": "category"}
    assert api_client.patch(url, {"text": ""}, format="json").status_code == 400


@pytest.mark.django_db
def test_ttl_expiry_is_immediate_and_null_clears_it(api_client):
    with time_machine.travel(T0, tick=False):
        short = _store(api_client, text="Temporary code 1234", ttl="1s", key="otp")
        assert short["memory"]["expires_at"] == "2026-03-01T12:00:01.000000Z"
        long_ = _store(api_client, text="Visiting until Friday", ttl="7d")
        unix = _store(
            api_client, text="unix ms", expires_at=int((T0 + timedelta(hours=1)).timestamp() * 1000)
        )
        assert unix["memory"]["expires_at"] == "2026-03-01T13:00:00.000000Z"
    with time_machine.travel(T0 + timedelta(seconds=2), tick=False):
        assert api_client.get(f"/api/v1/memories/{short['memory_id']}").status_code == 404
        assert api_client.get("/api/v1/memories/by-key/otp").json() == {"ok": True, "memory": None}
        assert short["memory_id"] not in {
            m["id"] for m in api_client.get("/api/v1/memories").json()["memories"]
        }
        assert api_client.get("/api/v1/keys").json()["keys"] == []
        # Not pruned yet: still `active` in the table, but invisible to every read.
        assert Memory.objects.get(pk=short["memory_id"]).status == "active"
        # The key is free again: re-storing creates a new memory, the old one is expired.
        again = _store(api_client, text="New code 5678", key="otp")
        assert again["message"] == "Ok" and again["memory_id"] != short["memory_id"]
        assert Memory.objects.get(pk=short["memory_id"]).status == "expired"

        cleared = api_client.patch(
            f"/api/v1/memories/{long_['memory_id']}", {"expires_at": None}, format="json"
        )
        assert cleared.json()["memory"]["expires_at"] is None
    with time_machine.travel(T0 + timedelta(days=30), tick=False):
        assert api_client.get(f"/api/v1/memories/{long_['memory_id']}").status_code == 200


@pytest.mark.django_db
def test_agent_default_ttl(api_client, agent):
    agent.default_ttl = timedelta(days=1)
    agent.save()
    with time_machine.travel(T0, tick=False):
        body = _store(api_client, text="x")
        assert body["memory"]["expires_at"] == "2026-03-02T12:00:00.000000Z"
        never = _store(api_client, text="y", expires_at=None)
        assert never["memory"]["expires_at"] is None


@pytest.mark.django_db
def test_confirm_sets_last_confirmed_at(api_client):
    with time_machine.travel(T0, tick=False):
        memory_id = _store(api_client, text="x")["memory_id"]
    with time_machine.travel(T0 + timedelta(days=3), tick=False):
        response = api_client.post(f"/api/v1/memories/{memory_id}/confirm")
    memory = response.json()["memory"]
    assert memory["last_confirmed_at"] == "2026-03-04T12:00:00.000000Z"
    assert memory["version"] == 2
    assert MemoryRevision.objects.filter(memory_id=memory_id).latest("id").change_type == "confirm"


@pytest.mark.django_db
def test_confirm_replays_under_idempotency_key(api_client):
    memory_id = _store(api_client, text="x")["memory_id"]
    url = f"/api/v1/memories/{memory_id}/confirm"
    first = api_client.post(url, HTTP_IDEMPOTENCY_KEY="c-1")
    second = api_client.post(url, HTTP_IDEMPOTENCY_KEY="c-1")
    assert first.content == second.content
    assert Memory.objects.get().version == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("patch", "/api/v1/memories/{id}", {"text": "changed"}),
        ("delete", "/api/v1/memories/{id}", None),
        ("delete", "/api/v1/memories/by-key/pref", None),
        ("post", "/api/v1/memories/{id}/confirm", None),
        ("get", "/api/v1/memories/{id}", None),
        ("get", "/api/v1/memories/by-key/pref", None),
    ],
)
def test_nul_in_the_subject_query_parameter_is_invalid_input(api_client, method, url, body):
    memory_id = _store(api_client, text="unchanged", key="pref")["memory_id"]
    response = getattr(api_client, method)(
        url.format(id=memory_id) + "?subject_id=ann%00bob", body, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {
        "ok": False,
        "error": {
            "code": "INVALID_INPUT",
            "message": "'subject_id' contains control characters",
            "details": {"field": "subject_id"},
        },
    }
    memory = Memory.objects.get()
    assert (memory.text, memory.version, memory.status) == ("unchanged", 1, "active")


@pytest.mark.django_db
@pytest.mark.parametrize("as_json", [False, True])
def test_walk_merges_own_workspace_and_shared_memories_newest_first(tenant, agent, as_json):
    """The list walks each owner's memories apart (its own index) and merges them: the pages
    hold every visible memory once, in the one newest-first order across owners."""
    friend = make_agent(tenant, "friend-bot")
    agent.reads_from.set([friend])
    me, them = Principal(tenant=tenant, agent=agent), Principal(tenant=tenant, agent=friend)
    for i in range(12):  # owners interleaved in time, two rows per instant
        who = (me, them, me)[i % 3]
        body = {"text": f"fact {i}", "dedup_policy": "insert"}
        if i % 4 == 1:
            body["category"] = "workspace"
        memory_store(principal=who, data=body, now=T0 + timedelta(minutes=i // 2))
    expected = list(
        visible_memories(tenant=tenant, agent=agent, subject_id=None, now=T0 + timedelta(hours=1))
        .order_by("-updated_at", "-id")
        .values_list("id", flat=True)
    )
    assert len({m.agent_id for m in Memory.objects.filter(pk__in=expected)}) == 3
    listing = selectors.memory_list_json if as_json else selectors.memory_list
    seen, cursor = [], None
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        while True:
            filters = {"limit": 4, **({"cursor": cursor} if cursor else {})}
            page, cursor, _ = listing(principal=me, filters=filters)
            seen += [json.loads(row)["id"] if as_json else row.pk for row in page]
            if cursor is None:
                break
    assert seen == expected

"""Forget, purge, thread end, and secret rejection end to end."""

from __future__ import annotations

import json

import pytest

from memories.models import IdempotencyRecord, Memory, MemoryRevision

AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLQ"
SLACK = "xoxb-" + "1234567890-abcdefghijKLMNOP"


def _store(client, headers=None, **body):
    response = client.post("/api/v1/memories", body, format="json", **(headers or {}))
    assert response.status_code in (200, 201), response.content
    return response.json()


@pytest.fixture
def admin_client(key_client, agent):
    return key_client(agent, scopes=["read", "write", "admin"])


@pytest.mark.django_db
def test_forget_by_id_tombstones_once(api_client):
    memory_id = _store(api_client, text="Wrong fact")["memory_id"]
    url = f"/api/v1/memories/{memory_id}"
    assert api_client.delete(url, {"reason": "not true"}, format="json").json() == {
        "ok": True,
        "deleted": True,
        "memory_id": memory_id,
    }
    memory = Memory.objects.get()
    assert (memory.status, memory.tombstone_reason, memory.tombstoned_by, memory.version) == (
        "tombstoned",
        "not true",
        "agent:support-bot",
        2,
    )
    assert memory.text == "Wrong fact"  # kept for previously_corrected
    again = api_client.delete(url).json()
    assert again == {"ok": True, "deleted": False, "memory_id": memory_id}
    assert api_client.get(url).status_code == 404
    types = list(MemoryRevision.objects.order_by("id").values_list("change_type", "reason"))
    assert types == [("create", ""), ("tombstone", "not true")]


@pytest.mark.django_db
def test_forget_by_key(api_client):
    memory_id = _store(api_client, text="Ann", key="user/name", subject_id="u1")["memory_id"]
    assert api_client.delete("/api/v1/memories/by-key/user/name").json() == {
        "ok": True,
        "deleted": False,
        "memory_id": None,
    }
    assert api_client.delete("/api/v1/memories/by-key/user/name?subject_id=u1").json() == {
        "ok": True,
        "deleted": True,
        "memory_id": memory_id,
    }
    # The key is free for a new fact.
    assert _store(api_client, text="Anna", key="user/name", subject_id="u1")["message"] == "Ok"


@pytest.mark.django_db
def test_purge_erases_content_from_memory_revisions_and_replays(api_client, admin_client):
    created = _store(
        api_client,
        {"HTTP_IDEMPOTENCY_KEY": "store-1"},
        text="Home address: 1 Main St",
        key="address",
        data={"street": "1 Main St"},
        tags=["pii"],
    )
    memory_id = created["memory_id"]
    _store(api_client, text="Home address: 2 Side St", key="address")
    assert IdempotencyRecord.objects.count() == 1
    response = admin_client.delete("/api/v1/memories/by-key/address?purge=true&reason=gdpr")
    assert response.json() == {"ok": True, "deleted": True, "memory_id": memory_id}

    memory = Memory.objects.get(pk=memory_id)
    assert (memory.text, memory.data, memory.key, memory.tags, memory.embedding) == (
        "",
        None,
        None,
        [],
        None,
    )
    assert memory.status == "tombstoned" and memory.purged_at is not None
    assert memory.content_hash and memory.created_at  # ids, hashes and timestamps stay
    history = json.dumps(list(MemoryRevision.objects.values("before", "after", "reason")))
    assert "Main St" not in history and "Side St" not in history
    assert list(MemoryRevision.objects.order_by("id").values_list("change_type", flat=True)) == [
        "create",
        "update",
        "purge",
    ]
    assert IdempotencyRecord.objects.count() == 0
    # Purged content is gone for good: no previously_corrected hit, no restore of the text.
    again = _store(api_client, text="Home address: 2 Side St")
    assert "previously_corrected" not in again


@pytest.mark.django_db
def test_purge_after_forget_still_erases(api_client, admin_client):
    memory_id = _store(api_client, text="Secret-ish note")["memory_id"]
    api_client.delete(f"/api/v1/memories/{memory_id}")
    purged = admin_client.delete(f"/api/v1/memories/{memory_id}?purge=true").json()
    assert purged == {"ok": True, "deleted": True, "memory_id": memory_id}
    assert Memory.objects.get().text == ""
    assert (
        admin_client.delete(f"/api/v1/memories/{memory_id}?purge=true").json()["deleted"] is False
    )


@pytest.mark.django_db
def test_thread_end_removes_only_that_threads_conversation(api_client, key_client, agent):
    keep_other_thread = _store(api_client, text="a", category="conversation", thread_id="t2")
    keep_core = _store(api_client, text="b", thread_id="t1")
    gone = [
        _store(api_client, text=f"turn {i}", category="conversation", thread_id="t1")["memory_id"]
        for i in range(3)
    ]
    response = api_client.post("/api/v1/threads/t1/end")
    assert response.json() == {"ok": True, "removed": 3}
    statuses = dict(Memory.objects.values_list("id", "status"))
    assert {statuses[i] for i in gone} == {"expired"}
    assert statuses[keep_other_thread["memory_id"]] == "active"
    assert statuses[keep_core["memory_id"]] == "active"
    assert api_client.post("/api/v1/threads/t1/end").json() == {"ok": True, "removed": 0}
    revision = MemoryRevision.objects.filter(memory_id=gone[0]).latest("id")
    assert (revision.change_type, revision.reason) == ("expire", "thread ended")


@pytest.mark.django_db
def test_secret_in_tags_and_patch_rejected(api_client):
    tagged = api_client.post("/api/v1/memories", {"text": "x", "tags": [AWS_KEY]}, format="json")
    assert tagged.status_code == 422
    assert tagged.json()["error"]["details"]["rule"] == "aws_access_key_id"
    memory_id = _store(api_client, text="clean")["memory_id"]
    patched = api_client.patch(
        f"/api/v1/memories/{memory_id}", {"text": f"now {AWS_KEY}"}, format="json"
    )
    assert patched.status_code == 422
    assert Memory.objects.get().text == "clean"

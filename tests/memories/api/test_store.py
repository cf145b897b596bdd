"""Store (docs/api.md#store--post-apiv1memories): keyed upsert, compare-and-set, dedup policies,
validation and the envelope."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager

import pytest
from django.db import connection

from memories.embeddings import HashingEmbedder
from memories.models import ChangeType, Memory, MemoryRevision
from tests.factories import make_agent

COLBY = "My son Colby lives in Los Angeles."


def store(client, headers=None, **body):
    return client.post("/api/v1/memories", body, format="json", **(headers or {}))


def error(code, message, **details):
    return {"ok": False, "error": {"code": code, "message": message, "details": details}}


@pytest.mark.django_db
def test_store_returns_the_whole_memory_object(api_client, agent):
    response = store(
        api_client,
        text="Prefers email over phone.",
        kind="preference",
        data={"channel": "email"},
        tags=["  Contact Prefs ", "contact-prefs", "CRM"],
        importance=0.8,
        source_provider="openai",
        mentions=[{"name": "Email", "type": "channel"}],
    )
    assert response.status_code == 201
    body = response.json()
    memory = Memory.objects.get(pk=body["memory_id"])
    ts = body["memory"]["created_at"]
    assert ts.endswith("Z")
    assert body == {
        "ok": True,
        "memory_id": memory.id,
        "message": "Ok",
        "action": "created",
        "version": 1,
        "memory": {
            "id": memory.id,
            "key": None,
            "category": "core",
            "kind": "preference",
            "scope": "agent",
            "text": "Prefers email over phone.",
            "data": {"channel": "email"},
            "tags": ["contact-prefs", "crm"],
            "subject_id": None,
            "thread_id": None,
            "importance": 0.8,
            "confidence": 1.0,
            "capture_mode": "explicit",
            "source_provider": "openai",
            "mentions": [{"name": "Email", "type": "channel"}],
            "occurred_at": None,
            "expires_at": None,
            "last_confirmed_at": ts,
            "created_at": ts,
            "updated_at": ts,
            "version": 1,
            "status": "active",
            "review_state": "none",
            "size_bytes": len(b"Prefers email over phone.") + len(b'{"channel":"email"}'),
            "agent": "support-bot",
            "source": "own",
            "evidence": None,
        },
    }
    assert memory.embedding is not None and len(memory.embedding) == 384
    assert memory.embedding_model == "hashing-v1"
    assert memory.content_hash == hashlib.sha256(b"prefers email over phone").hexdigest()
    assert memory.created_by == "agent:support-bot"
    revision = MemoryRevision.objects.get(memory=memory)
    assert (revision.change_type, revision.actor, revision.version) == (
        ChangeType.CREATE,
        "agent:support-bot",
        1,
    )
    assert "embedding" not in json.dumps(body)


@pytest.mark.django_db
def test_restoring_a_key_five_times_updates_one_memory(api_client):
    ids = set()
    for n in range(1, 6):
        response = store(api_client, key="user.timezone", text=f"Timezone is UTC+{n}")
        assert response.status_code == (201 if n == 1 else 200)
        body = response.json()
        assert body["message"] == ("Ok" if n == 1 else "Updated")
        assert body["action"] == ("created" if n == 1 else "updated")
        assert body["version"] == n == body["memory"]["version"]
        ids.add(body["memory_id"])
    assert len(ids) == 1
    memory = Memory.objects.get()
    assert (memory.version, memory.text, memory.status) == (5, "Timezone is UTC+5", "active")
    revisions = list(MemoryRevision.objects.filter(memory=memory).order_by("id"))
    assert [r.version for r in revisions] == [1, 2, 3, 4, 5]
    assert [r.change_type for r in revisions] == ["create"] + ["update"] * 4
    assert revisions[-1].before["text"] == "Timezone is UTC+4"
    assert revisions[-1].after["text"] == "Timezone is UTC+5"


@pytest.mark.django_db
def test_keys_are_per_subject_and_per_owner(api_client):
    a = store(api_client, key="name", text="Ann", subject_id="u1").json()
    b = store(api_client, key="name", text="Bob", subject_id="u2").json()
    c = store(api_client, key="name", text="Team", category="workspace").json()
    assert len({a["memory_id"], b["memory_id"], c["memory_id"]}) == 3
    assert c["memory"]["agent"] is None and c["memory"]["source"] == "workspace"


@pytest.mark.django_db
def test_compare_and_set_on_store(api_client):
    created = store(api_client, key="plan", text="v1", expected_version=0)
    assert created.status_code == 201
    again = store(api_client, key="plan", text="dup", expected_version=0)
    assert again.status_code == 409
    assert again.json() == error(
        "CONFLICT", "The memory has changed since you read it", current_version=1
    )
    stale = store(api_client, key="plan", text="v2", expected_version=3)
    assert stale.json()["error"]["details"] == {"current_version": 1}
    ok = store(api_client, key="plan", text="v2", expected_version=1)
    assert ok.status_code == 200 and ok.json()["version"] == 2
    updated_at = ok.json()["memory"]["updated_at"]
    by_time = store(api_client, key="plan", text="v3", expected_updated_at=updated_at)
    assert by_time.status_code == 200 and by_time.json()["version"] == 3
    old_time = store(api_client, key="plan", text="v4", expected_updated_at=updated_at)
    assert old_time.status_code == 409
    create_only = store(api_client, key="plan", text="v4", expected_updated_at=None)
    assert create_only.status_code == 409
    missing = store(api_client, key="nope", text="x", expected_version=2)
    assert missing.json() == error(
        "CONFLICT", "The memory has changed since you read it", current_version=0
    )
    assert Memory.objects.get(key="plan").text == "v3"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cas", "field"),
    [
        ({"expected_version": 0}, "expected_version"),
        ({"expected_version": 4}, "expected_version"),
        ({"expected_updated_at": None}, "expected_updated_at"),
        ({"expected_updated_at": "2026-01-01T00:00:00Z"}, "expected_updated_at"),
        ({"expected_version": None, "expected_updated_at": None}, "expected_updated_at"),
    ],
)
def test_compare_and_set_without_a_key_is_invalid_input(api_client, cas, field):
    response = store(api_client, text="unguarded", **cas)
    assert response.status_code == 400
    assert response.json() == error(
        "INVALID_INPUT",
        f"'{field}' needs a 'key' or a single kind (compare-and-set is per record)",
        field=field,
    )
    assert Memory.objects.count() == 0
    # `expected_version: null` is no condition at all.
    assert store(api_client, text="plain", expected_version=None).status_code == 201


@pytest.mark.django_db
def test_skip_if_near_then_previously_corrected(api_client):
    first = store(api_client, text=COLBY, dedup_policy="skip_if_near")
    assert first.status_code == 201
    first_id = first.json()["memory_id"]

    second = store(api_client, text=COLBY, dedup_policy="skip_if_near")
    assert second.status_code == 200
    body = second.json()
    assert body["memory_id"] == first_id
    assert body["message"] == "Already remembered"
    assert body["near_duplicates"] == [{"memory_id": first_id, "text": COLBY, "similarity": 1.0}]
    assert Memory.objects.count() == 1

    forget = api_client.delete(f"/api/v1/memories/{first_id}?reason=moved to Denver")
    assert forget.json() == {"ok": True, "deleted": True, "memory_id": first_id}

    third = store(api_client, text=COLBY, dedup_policy="skip_if_near")
    assert third.status_code == 201
    body = third.json()
    assert body["memory_id"] != first_id
    assert "near_duplicates" not in body
    [corrected] = body["previously_corrected"]
    tombstoned_at = corrected.pop("tombstoned_at")
    assert tombstoned_at.endswith("Z")
    assert corrected == {
        "memory_id": first_id,
        "text": COLBY,
        "reason": "moved to Denver",
        "similarity": 1.0,
    }


@pytest.mark.django_db
def test_ask_inserts_and_flags_near_duplicates_for_review(api_client):
    first = store(api_client, text=COLBY).json()
    second = store(api_client, text="my son colby lives in los angeles").json()
    assert second["message"] == "Ok"
    assert second["memory_id"] != first["memory_id"]
    assert second["near_duplicates"] == [
        {"memory_id": first["memory_id"], "text": COLBY, "similarity": 1.0}
    ]
    assert second["memory"]["review_state"] == "pending"
    # The console says why it waits; the reason is not part of the API's memory object.
    assert Memory.objects.get(pk=second["memory_id"]).review_reason == "near_duplicate"
    assert "review_reason" not in second["memory"]
    # Cosine near duplicates (not the same text) count too.
    third = store(api_client, text="My son Colby lives in Los Angeles now.").json()
    assert third["near_duplicates"][0]["similarity"] >= 0.9
    # `insert` does no check at all.
    fourth = store(api_client, text=COLBY, dedup_policy="insert").json()
    assert "near_duplicates" not in fourth
    assert fourth["memory"]["review_state"] == "none"


@pytest.mark.django_db
def test_near_duplicates_respect_the_agent_threshold_and_visibility(
    api_client, tenant, agent, key_client
):
    other = make_agent(tenant, "other-bot")
    theirs = key_client(other).post("/api/v1/memories", {"text": COLBY}, format="json")
    assert theirs.status_code == 201
    # Another agent's private memory is not a near duplicate of ours.
    ours = store(api_client, text=COLBY)
    assert ours.status_code == 201 and ours.json()["memory"]["text"] == COLBY
    assert "near_duplicates" not in ours.json()
    # Our own is (the check did run), and only ours.
    again = store(api_client, text=COLBY).json()
    assert [d["memory_id"] for d in again["near_duplicates"]] == [ours.json()["memory_id"]]
    # The agent's threshold: above a reworded text's cosine (~0.93), only the same text counts.
    agent.dedup_threshold = 0.99
    agent.save()
    reworded = store(api_client, text="My son Colby lives in Los Angeles now.")
    assert reworded.status_code == 201 and "near_duplicates" not in reworded.json()
    same = store(api_client, text=COLBY.upper()).json()
    assert len(same["near_duplicates"]) == 2  # the same normalised text: ours, twice


@pytest.mark.django_db
def test_inferred_memories_wait_for_review(api_client):
    body = store(api_client, text="Seems to like jazz", capture_mode="inferred").json()
    assert body["memory"]["review_state"] == "pending"
    assert Memory.objects.get(pk=body["memory_id"]).review_reason == "inferred"
    # A keyed upsert that is inferred waits again, saying so; an explicit one is not pending.
    keyed = store(api_client, text="Likes jazz", key="music", capture_mode="inferred").json()
    assert Memory.objects.get(pk=keyed["memory_id"]).review_reason == "inferred"
    plain = store(api_client, text="Likes blues", key="blues").json()
    assert Memory.objects.get(pk=plain["memory_id"]).review_reason == ""


@pytest.mark.django_db
def test_category_rules(api_client, agent):
    missing_thread = store(api_client, text="hi", category="conversation")
    assert missing_thread.status_code == 400
    assert missing_thread.json() == error(
        "INVALID_INPUT", "A conversation memory needs a 'thread_id'", field="thread_id"
    )
    ok = store(api_client, text="hi", category="conversation", session_id="run-1").json()
    assert ok["memory"]["thread_id"] == "run-1"
    custom = store(api_client, text="x", category="project_notes-2").json()
    assert custom["memory"]["category"] == "project_notes-2"
    bad = store(api_client, text="x", category="Bad Category")
    assert bad.status_code == 400 and bad.json()["error"]["details"] == {"field": "category"}
    agent.default_category = "daily"
    agent.save()
    assert store(api_client, text="y").json()["memory"]["category"] == "daily"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text"),
        ({"text": "   "}, "text"),
        ({"text": 5}, "text"),
        ({"text": "x", "importance": 2}, "importance"),
        ({"text": "x", "confidence": "high"}, "confidence"),
        ({"text": "x", "tags": ["ok", "bad tag!"]}, "tags"),
        ({"text": "x", "tags": [f"t{i}" for i in range(33)]}, "tags"),
        ({"text": "x", "tags": "single"}, "tags"),
        ({"text": "x", "ttl": "5 years"}, "ttl"),
        ({"text": "x", "ttl": "1h", "expires_at": "2099-01-01T00:00:00Z"}, "ttl"),
        ({"text": "x", "expires_at": "yesterday"}, "expires_at"),
        ({"text": "x", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"text": "x", "dedup_policy": "maybe"}, "dedup_policy"),
        ({"text": "x", "capture_mode": "guessed"}, "capture_mode"),
        ({"text": "x", "mentions": [{"type": "person"}]}, "mentions"),
        ({"text": "x", "data": [1, 2]}, "data"),
        ({"text": "x", "expected_version": -1}, "expected_version"),
        ({"text": "x", "surprise": 1}, "surprise"),
        ({"text": "x", "key": "a\tb"}, "key"),
    ],
)
def test_invalid_store_bodies_name_the_field(api_client, body, field):
    response = api_client.post("/api/v1/memories", body, format="json")
    assert response.status_code == 400
    payload = response.json()
    assert payload["ok"] is False
    assert payload["error"]["code"] == "INVALID_INPUT"
    assert payload["error"]["details"]["field"] == field
    assert Memory.objects.count() == 0


@pytest.mark.django_db
def test_size_limits(api_client, settings):
    settings.MAX_TEXT_CHARS = 10
    too_long = store(api_client, text="x" * 11)
    assert too_long.json() == error(
        "INVALID_INPUT", "'text' is longer than 10 characters", field="text", limit_chars=10
    )
    assert store(api_client, text="é" * 10).status_code == 201
    settings.MEMORYHUB_MAX_DATA_BYTES = 20
    big = store(api_client, data={"blob": "y" * 30})
    assert big.status_code == 400 and big.json()["error"]["details"]["field"] == "data"


@pytest.mark.django_db
def test_data_only_memory(api_client):
    body = store(api_client, data={"city": "Zürich"}).json()
    assert body["memory"]["text"] == ""
    assert body["memory"]["size_bytes"] == len('{"city":"Zürich"}'.encode())


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"text": "bad\u0000text"},
        {"text": "x", "data": {"nested": ["ok", "b\u0000d"]}},
        {"text": "x", "data": {"k\u0000": 1}},
        {"text": "x", "tags": ["a\u0000"]},
    ],
)
def test_nul_bytes_are_invalid_input(api_client, body):
    response = api_client.post("/api/v1/memories", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert response.json()["error"]["message"] == "NUL bytes are not allowed"


@pytest.mark.django_db
def test_malformed_json_and_wrong_shapes(api_client):
    response = api_client.generic(
        "POST", "/api/v1/memories", '{"text": "x",', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json() == error("INVALID_INPUT", "Malformed JSON body", field="body")
    response = api_client.post("/api/v1/memories", ["text"], format="json")
    assert response.json() == error("INVALID_INPUT", "The body must be a JSON object", field="body")


@pytest.mark.django_db
def test_body_over_the_limit_is_413_json(api_client, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    response = store(api_client, text="x" * 2000)
    assert response.status_code == 413
    assert response.json() == error(
        "PAYLOAD_TOO_LARGE", "Request body is too large", limit_bytes=1000
    )


@pytest.mark.django_db
def test_embedding_failure_writes_nothing(api_client, monkeypatch):
    def broken(self, texts):
        raise RuntimeError("backend down")

    monkeypatch.setattr(HashingEmbedder, "embed", broken)
    response = store(api_client, text="anything", key="k")
    assert response.status_code == 502
    assert response.json() == error("EMBEDDING_ERROR", "The embedding backend failed")
    assert Memory.objects.count() == 0
    assert MemoryRevision.objects.count() == 0


@contextmanager
def database_unreachable():
    """Every new connection goes to a socket directory that does not exist (connect fails)."""
    original = connection.settings_dict["HOST"]
    connection.close()
    connection.settings_dict["HOST"] = "/nonexistent-socket-dir"
    try:
        yield
    finally:
        connection.settings_dict["HOST"] = original
        connection.close()


@contextmanager
def database_dies_after_authentication():
    """The server ends this request's connection once the key has been checked: the next
    statement meets a terminated backend, and any reconnect finds no server."""
    killer = connection.copy()
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid

    def wrapper(execute, sql, params, many, context):
        if "accounts_apikey" not in sql and connection.settings_dict["HOST"] != "/nowhere":
            with killer.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s::int, 5000)", [pid])
            connection.settings_dict["HOST"] = "/nowhere"
        return execute(sql, params, many, context)

    original = connection.settings_dict["HOST"]
    try:
        with connection.execute_wrapper(wrapper):
            yield
    finally:
        killer.close()
        connection.settings_dict["HOST"] = original
        connection.close()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outage", [database_unreachable, database_dies_after_authentication])
def test_database_outage_is_503_json_with_retry_after(api_client, outage):
    memory_id = store(api_client, text="stored before the outage").json()["memory_id"]
    requests = {
        "store": lambda: store(api_client, text="x", key="during-outage"),
        "read": lambda: api_client.get(f"/api/v1/memories/{memory_id}"),
    }
    for name, send in requests.items():
        with outage():
            response = send()
        assert response.status_code == 503, name
        assert response["Retry-After"] == "5", name
        assert response["Content-Type"] == "application/json", name
        assert response.json() == error("BACKEND_UNAVAILABLE", "The database is unavailable")
    # The server is back: nothing half-written, and the next request works again.
    assert list(Memory.objects.values_list("id", flat=True)) == [memory_id]
    assert api_client.get(f"/api/v1/memories/{memory_id}").status_code == 200


@pytest.mark.django_db
def test_entry_cap_zero_is_quota_exceeded(api_client, agent):
    agent.entry_cap = 0
    agent.save()
    response = store(api_client, text="x")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "QUOTA_EXCEEDED"


@pytest.mark.django_db
def test_search_vector_is_filled(api_client):
    store(api_client, text="The quick brown fox", key="fox")
    with connection.cursor() as cursor:
        cursor.execute("SELECT search_vector::text FROM memories_memory")
        assert "quick" in cursor.fetchone()[0]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"text": "lone \\ud800 surrogate"}', "text"),
        ('{"text": "x", "importance": 1e400}', "importance"),
        ('{"text": "x", "importance": ' + "9" * 400 + "}", "importance"),
        ('{"text": "x", "key": "k", "expected_version": 4294967296}', "expected_version"),
        ('{"text": "x", "ttl": "999999999d"}', "ttl"),
        ('{"text": "x", "expires_at": 99999999999999999}', "expires_at"),
        ('{"text": "x", "data": ' + '{"a": ' * 40 + "1" + "}" * 40 + "}", "data"),
    ],
)
def test_hostile_values_are_400_not_500(api_client, raw, field):
    response = api_client.generic("POST", "/api/v1/memories", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["field"].split(".")[0] == field
    assert Memory.objects.count() == 0

"""Keys are NFKC-normalised with look-alikes refused (docs/api.md#the-memory-object);
`Idempotency-Key`s are kept only as digests, and replays and mismatches still work."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from memories import idempotency
from memories.models import IdempotencyRecord, Memory

FULL_WIDTH = "ｕｓｅｒ．ｎａｍｅ"  # noqa: RUF001  full-width on purpose: NFKC folds it


def _store(client, **body):
    response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


@pytest.mark.django_db
def test_a_full_width_key_upserts_the_same_memory(api_client):
    first = _store(api_client, text="Ann", key="user.name")
    again = _store(api_client, text="Anna", key=FULL_WIDTH)
    assert (again["memory_id"], again["message"], again["version"]) == (
        first["memory_id"],
        "Updated",
        2,
    )
    assert list(Memory.objects.values_list("key", "text")) == [("user.name", "Anna")]
    recalled = api_client.get(f"/api/v1/memories/by-key/{quote(FULL_WIDTH)}").json()
    assert recalled["memory"]["id"] == first["memory_id"]
    forgotten = api_client.delete(f"/api/v1/memories/by-key/{quote(FULL_WIDTH)}").json()
    assert forgotten == {"ok": True, "deleted": True, "memory_id": first["memory_id"]}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key",
    ["user\u200b.name", "user.\x07name", "\ufeffuser.name", "user\u2028.name", "user.\u202ename"],
    ids=["zero-width-space", "bell", "bom", "line-separator", "bidi-override"],
)
def test_control_and_invisible_characters_in_a_key_are_refused(api_client, key):
    _store(api_client, text="Ann", key="user.name")
    stored = api_client.post("/api/v1/memories", {"text": "Eve", "key": key}, format="json")
    assert stored.status_code == 400
    assert stored.json()["error"]["code"] == "INVALID_INPUT"
    assert stored.json()["error"]["details"] == {"field": "key"}
    path = f"/api/v1/memories/by-key/{quote(key)}"
    for response in (api_client.get(path), api_client.delete(path)):
        assert response.status_code == 400
        assert response.json()["error"]["details"] == {"field": "key"}
    assert list(Memory.objects.values_list("key", "text", "status")) == [
        ("user.name", "Ann", "active")
    ]


@pytest.mark.django_db
def test_an_operator_correction_normalises_and_refuses_keys_the_same_way(tenant, agent):
    from memories.services.operator_actions import memory_correct
    from memoryhub.errors import InvalidInput
    from tests.support.memories import store

    memory = store(agent, "Ann")
    corrected = memory_correct(
        tenant=tenant,
        memory_id=memory.pk,
        actor="operator:o",
        changes={"key": FULL_WIDTH},
        expected_version=1,
    )
    assert corrected.key == "user.name"
    with pytest.raises(InvalidInput) as exc:
        memory_correct(
            tenant=tenant,
            memory_id=memory.pk,
            actor="operator:o",
            changes={"key": "user\u200b.name"},
            expected_version=2,
        )
    assert exc.value.details == {"field": "key"}


@pytest.mark.django_db
def test_the_idempotency_key_is_stored_as_a_digest_and_still_replays(api_client, tenant):
    key = "retry-7f3a"
    first = api_client.post(
        "/api/v1/memories", {"text": "Ann"}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    replay = api_client.post(
        "/api/v1/memories", {"text": "Ann"}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert first.status_code == replay.status_code == 201
    assert first.content == replay.content
    record = IdempotencyRecord.objects.get()
    assert record.key_digest == idempotency.key_digest(tenant.pk, key)
    assert len(record.key_digest) == 64 and key not in record.key_digest
    other = api_client.post(
        "/api/v1/memories", {"text": "Bob"}, format="json", HTTP_IDEMPOTENCY_KEY=key
    )
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    assert Memory.objects.count() == 1


@pytest.mark.django_db
def test_digests_differ_by_tenant(tenant, other_tenant):
    assert idempotency.key_digest(tenant.pk, "k") != idempotency.key_digest(other_tenant.pk, "k")

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey
from accounts.services import api_key_revoke
from tests.factories import make_key

UNAUTHENTICATED_BODY = {
    "ok": False,
    "error": {
        "code": "UNAUTHENTICATED",
        "message": "Missing, malformed, revoked or expired API key",
        "details": {},
    },
}


def test_generated_keys_are_well_formed_and_checksummed():
    raw = keys.generate_key()
    assert raw.startswith("mh_") and len(raw) == 41
    assert keys.is_well_formed(raw)
    flipped = raw[:10] + ("A" if raw[10] != "A" else "B") + raw[11:]
    assert not keys.is_well_formed(flipped)
    assert not keys.is_well_formed("mh_short")
    assert not keys.is_well_formed(raw + "x")


@pytest.mark.django_db
def test_key_is_stored_only_as_a_hash(agent):
    row, raw = make_key(agent)
    stored = ApiKey.objects.filter(pk=row.pk).values().get()
    assert raw not in [str(v) for v in stored.values()]
    assert stored["key_hash"] == keys.hash_key(raw)
    assert stored["prefix"] == raw[:11]
    # Nothing anywhere in the database holds the key in clear.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM accounts_apikey WHERE key_hash = %s OR prefix = %s", [raw, raw]
        )
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db
def test_valid_key_authenticates(api_client, agent):
    response = api_client.get("/api/v1/whoami")
    assert response.status_code == 200
    assert response.json() == {
        "ok": True,
        "tenant": "acme",
        "agent": "support-bot",
        "scopes": ["read", "write"],
        "subject_id": None,
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "position",
    [0, 2, 3, 10, 11, 20, 34, 35, 38, 40],
    ids=[
        "mh-prefix",
        "separator",
        "lookup-first",
        "lookup-last",
        "body-after-lookup",
        "body-middle",
        "body-last",
        "checksum-first",
        "checksum-middle",
        "checksum-last",
    ],
)
def test_flipped_character_is_rejected_without_a_query(
    client, api_key, django_assert_num_queries, position
):
    changed = "a" if api_key[position] != "a" else "b"
    flipped = api_key[:position] + changed + api_key[position + 1 :]
    assert len(flipped) == len(api_key) and flipped != api_key
    with django_assert_num_queries(0):
        response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {flipped}")
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED_BODY


@pytest.mark.django_db
@pytest.mark.parametrize(
    "header", [None, "", "Bearer", "Basic abc", "Bearer mh_nope", "Bearer " + "mh_" + "A" * 38]
)
def test_missing_or_malformed_key_gets_one_body(client, header):
    extra = {"HTTP_AUTHORIZATION": header} if header is not None else {}
    response = client.get("/api/v1/whoami", **extra)
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED_BODY


@pytest.mark.django_db
def test_unknown_well_formed_key_is_rejected(client):
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {keys.generate_key()}")
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED_BODY


@pytest.mark.django_db
def test_revoked_key_is_rejected(client, agent):
    row, raw = make_key(agent)
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    api_key_revoke(tenant=agent.tenant, key_id=row.pk)
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED_BODY


@pytest.mark.django_db
def test_expired_key_is_rejected(client, agent):
    row, raw = make_key(agent, expires_in=timedelta(days=1))
    assert client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    ApiKey.objects.filter(pk=row.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    assert response.json() == UNAUTHENTICATED_BODY


@pytest.mark.django_db
def test_last_used_is_recorded_at_most_once_a_minute(client, agent):
    row, raw = make_key(agent)
    client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}")
    first = ApiKey.objects.get(pk=row.pk).last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        client.get("/api/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert ApiKey.objects.get(pk=row.pk).last_used_at == first
    assert not any(q["sql"].startswith("UPDATE") for q in queries)


@pytest.mark.django_db
def test_revoking_another_tenants_key_is_not_found(agent, other_tenant):
    from memoryhub.errors import NotFound

    row, _ = make_key(agent)
    with pytest.raises(NotFound):
        api_key_revoke(tenant=other_tenant, key_id=row.pk)

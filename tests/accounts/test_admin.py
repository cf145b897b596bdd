"""Django admin for accounts: an operator's escape hatch, read-mostly (keys only revocable)."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts import keys
from accounts.models import ApiKey, Tenant
from tests.factories import make_agent, make_key


@pytest.fixture
def superuser_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root@example.test", "root@example.test", "x")
    client.force_login(user)
    return client


def _form(**fields):
    """A change form as the admin page posts it (split date and time for datetimes)."""
    data = {}
    for name, value in fields.items():
        if hasattr(value, "date"):
            data[f"{name}_0"], data[f"{name}_1"] = (
                value.strftime("%Y-%m-%d"),
                value.strftime("%H:%M:%S"),
            )
        else:
            data[name] = value
    return data


@pytest.mark.django_db
def test_api_keys_cannot_be_added_or_deleted_only_revoked(superuser_client, agent):
    row, raw = make_key(agent, scopes=["read"])
    assert superuser_client.get(reverse("admin:accounts_apikey_changelist")).status_code == 200
    assert superuser_client.get(reverse("admin:accounts_apikey_add")).status_code == 403
    delete_url = reverse("admin:accounts_apikey_delete", args=[row.pk])
    assert superuser_client.post(delete_url, {"post": "yes"}).status_code == 403

    change_url = reverse("admin:accounts_apikey_change", args=[row.pk])
    page = superuser_client.get(change_url)
    assert page.status_code == 200
    assert 'name="key_hash"' not in page.content.decode()  # shown, never an input
    revoked = timezone.now().replace(microsecond=0)
    response = superuser_client.post(
        change_url,
        _form(name="ops", revoked_at=revoked, expires_at="", key_hash="0" * 64, scopes="admin"),
    )
    assert response.status_code == 302, response.content
    row.refresh_from_db()
    # Only the name is editable; revoking is the changelist's action (below).
    assert (row.name, row.revoked_at, row.scopes) == ("ops", None, ["read"])
    assert keys.matches(raw, row.key_hash)
    assert ApiKey.objects.count() == 1


def _revoke(client, *rows):
    return client.post(
        reverse("admin:accounts_apikey_changelist"),
        {"action": "revoke_selected", "_selected_action": [r.pk for r in rows]},
        follow=True,
    )


@pytest.mark.django_db
def test_revoke_selected_keys_action(superuser_client, agent, other_tenant):
    from accounts.services import api_key_revoke

    first, _ = make_key(agent)
    second, _ = make_key(agent)
    elsewhere, _ = make_key(make_agent(other_tenant, "globex-bot"))
    earlier = api_key_revoke(tenant=agent.tenant, key_id=second.pk).revoked_at
    response = _revoke(superuser_client, first, second, elsewhere)
    assert response.status_code == 200
    assert "Revoked 2 keys (1 already revoked)." in response.content.decode()
    for row in (first, second, elsewhere):
        row.refresh_from_db()
    assert first.revoked_at is not None and elsewhere.revoked_at is not None
    assert second.revoked_at == earlier  # revoking twice keeps the first time


@pytest.mark.django_db
def test_a_revoked_key_cannot_be_unrevoked(superuser_client, agent):
    row, _ = make_key(agent)
    _revoke(superuser_client, row)
    row.refresh_from_db()
    revoked = row.revoked_at
    assert revoked is not None
    change_url = reverse("admin:accounts_apikey_change", args=[row.pk])
    assert 'name="revoked_at' not in superuser_client.get(change_url).content.decode()
    response = superuser_client.post(change_url, _form(name="back", revoked_at="", expires_at=""))
    assert response.status_code == 302, response.content
    row.refresh_from_db()
    assert (row.name, row.revoked_at) == ("back", revoked)


@pytest.mark.django_db
def test_expiry_only_moves_earlier(superuser_client, agent):
    from datetime import timedelta

    row, _ = make_key(agent, expires_in=timedelta(days=30))
    expires = row.expires_at
    change_url = reverse("admin:accounts_apikey_change", args=[row.pk])
    for refused in (expires + timedelta(days=1), ""):
        response = superuser_client.post(change_url, _form(name="", expires_at=refused))
        assert response.status_code == 200
        assert "An expiry can only be moved earlier" in response.content.decode()
        row.refresh_from_db()
        assert row.expires_at == expires
    sooner = (expires - timedelta(days=20)).replace(microsecond=0)
    response = superuser_client.post(change_url, _form(name="", expires_at=sooner))
    assert response.status_code == 302, response.content
    row.refresh_from_db()
    assert row.expires_at == sooner

    # A key that never expires may be given an expiry.
    forever, _ = make_key(agent)
    change_url = reverse("admin:accounts_apikey_change", args=[forever.pk])
    response = superuser_client.post(change_url, _form(name="", expires_at=sooner))
    assert response.status_code == 302, response.content
    forever.refresh_from_db()
    assert forever.expires_at == sooner


@pytest.mark.django_db
def test_tenants_are_read_mostly(superuser_client, tenant):
    assert superuser_client.get(reverse("admin:accounts_tenant_add")).status_code == 403
    delete_url = reverse("admin:accounts_tenant_delete", args=[tenant.pk])
    assert superuser_client.post(delete_url, {"post": "yes"}).status_code == 403
    change_url = reverse("admin:accounts_tenant_change", args=[tenant.pk])
    response = superuser_client.post(
        change_url,
        {
            "name": "Acme Inc.",
            "workspace_cap": "50",
            "extraction_daily_token_budget": "0",
            "user_cap": "70",
            "slug": "renamed",
            "max_retention": '{"core": 60}',
            "kinds_version": "9",
        },
    )
    assert response.status_code == 302, response.content
    assert Tenant.objects.values_list(
        "slug", "name", "workspace_cap", "user_cap", "max_retention", "kinds_version"
    ).get() == ("acme", "Acme Inc.", 50, 70, {}, 0)

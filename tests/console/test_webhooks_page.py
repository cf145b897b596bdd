"""The console's Webhooks page (docs/operations.md#webhooks): admins only, the secret shown once,
the delivery log with Resend, and the dashboard notice of an endpoint disabled after 24 h of
failures."""

from __future__ import annotations

import pytest
from django.utils import timezone

from memories.models import Event, WebhookDelivery, WebhookEndpoint
from memories.webhooks import endpoints
from tests.factories import make_operator


@pytest.fixture
def admin_client(client, tenant, settings):
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    client.force_login(make_operator(tenant, "admin@acme.test", "admin").user)
    return client


@pytest.mark.django_db
def test_admins_add_a_webhook_and_see_its_secret_once(admin_client):
    response = admin_client.post(
        "/console/webhooks/add/",
        {"url": "http://127.0.0.1:9/hook", "events": ["review.pending"], "description": "ops"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    endpoint = WebhookEndpoint.objects.get()
    secret = page.split('id="new-secret" class="mono key-once" readonly value="')[1].split('"')[0]
    assert secret.startswith("whsec_") and response["Cache-Control"] == "no-store"
    assert endpoint.events == ["review.pending"]
    listing = admin_client.get("/console/webhooks/").content.decode()
    assert "http://127.0.0.1:9/hook" in listing and secret not in listing
    refused = admin_client.post("/console/webhooks/add/", {"url": "ftp://x"})
    assert refused.status_code == 422 and "Webhook URL refused" in refused.content.decode()


@pytest.mark.django_db
def test_lesser_roles_and_other_tenants_get_no_webhooks(
    client, tenant, other_tenant, reviewer, outsider, settings
):
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    hook = endpoints.webhook_create(tenant=tenant, url="http://127.0.0.1:9/", actor="x").endpoint
    client.force_login(reviewer)
    assert client.get("/console/webhooks/").status_code == 403
    assert client.post(f"/console/webhooks/{hook.pk}/delete/").status_code == 403
    client.force_login(outsider)
    assert client.get(f"/console/webhooks/{hook.pk}/").status_code == 404
    assert client.post(f"/console/webhooks/{hook.pk}/delete/").status_code == 404
    assert WebhookEndpoint.objects.filter(pk=hook.pk).exists()


@pytest.mark.django_db
def test_the_delivery_log_resends_and_a_disabled_endpoint_shows_on_the_dashboard(
    admin_client, tenant
):
    hook = endpoints.webhook_create(tenant=tenant, url="http://127.0.0.1:9/", actor="x").endpoint
    event = Event.objects.create(tenant=tenant, type="subject.erased", position=1, data={})
    delivery = WebhookDelivery.objects.create(
        tenant=tenant,
        endpoint=hook,
        event=event,
        position=1,
        event_type="subject.erased",
        state="failed",
        attempts=9,
        last_status=503,
    )
    log = admin_client.get(f"/console/webhooks/{hook.pk}/").content.decode()
    assert f'data-delivery="{delivery.pk}"' in log and "503" in log
    admin_client.post(f"/console/deliveries/{delivery.pk}/resend/")
    assert WebhookDelivery.objects.filter(resend=True, event=event, state="pending").count() == 1

    assert "data-webhook-disabled" not in admin_client.get("/console/").content.decode()
    WebhookEndpoint.objects.filter(pk=hook.pk).update(
        disabled_at=timezone.now(), disabled_reason="every delivery failed for 24 hours"
    )
    dashboard = admin_client.get("/console/").content.decode()
    assert f'data-webhook-disabled="{hook.pk}"' in dashboard
    admin_client.post(f"/console/webhooks/{hook.pk}/enable/")
    assert WebhookEndpoint.objects.get(pk=hook.pk).disabled_at is None

"""Webhook endpoints of a tenant (REST `GET/POST /api/v1/webhooks`, `DELETE
/api/v1/webhooks/{id}` with the `admin` scope; the console's Webhooks page for admins)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from accounts.models import Tenant
from memories import validation
from memories.clock import resolve_now
from memories.events import feed
from memories.events.nudge import forget_tenants
from memories.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from memories.secrets_scan import scan_secrets
from memories.serialization import iso
from memories.webhooks import addresses, signing
from memoryhub.errors import InvalidInput, NotFound, QuotaExceeded

MAX_ENDPOINTS = 20
MAX_DESCRIPTION = 200


@dataclass(frozen=True)
class Created:
    endpoint: WebhookEndpoint
    secret: str  # shown once


def seal_secret(body: dict[str, Any]) -> dict[str, Any]:
    """A create's response as its idempotency record keeps it: the secret encrypted, as the
    endpoint keeps it (`unseal_secret` gives the replay back the secret)."""
    return {**body, "secret": signing.encrypt(body["secret"])}


def unseal_secret(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "secret": signing.decrypt(body["secret"])}


def clean_events(value: Any) -> list[str]:
    if value is None or value == "":
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput("'events' must be a list of event types", field="events")
    return feed.known_types(value, field="events")


def webhook_create(
    *,
    tenant: Tenant,
    url: Any,
    events: Any = None,
    description: Any = "",
    actor: str,
    now: datetime | None = None,
) -> Created:
    """A new endpoint, receiving the events after this moment; its secret is returned once."""
    now = resolve_now(now)
    endpoint = webhook_build(tenant=tenant, url=url, events=events, description=description)
    secret = signing.new_secret()
    feed.sequence(wait=True)  # so the cursor below is past every event committed before
    endpoint.secret_encrypted = signing.encrypt(secret)
    endpoint.created_by, endpoint.created_at = actor, now
    endpoint.cursor = feed.last_position(tenant.pk)
    endpoint.save(force_insert=True)
    forget_tenants()
    return Created(endpoint=endpoint, secret=secret)


def webhook_build(*, tenant: Tenant, url: Any, events: Any, description: Any) -> WebhookEndpoint:
    """An endpoint of `tenant` from a client's fields, checked (the URL by the SSRF guard, the
    events by name, the description for length and secrets, the tenant's quota), not saved:
    it has no secret, creator or cursor yet."""
    validation.reject_nul({"url": url, "events": events, "description": description})
    description = "" if description is None else description
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise InvalidInput(
            f"'description' must be text of at most {MAX_DESCRIPTION} characters",
            field="description",
        )
    scan_secrets({"description": description})
    wanted = clean_events(events)
    try:
        addresses.check(url)
    except addresses.Refused as exc:
        raise InvalidInput(f"Webhook URL refused: {exc}", field="url") from None
    if WebhookEndpoint.objects.for_tenant(tenant).count() >= MAX_ENDPOINTS:
        raise QuotaExceeded(
            f"A tenant has at most {MAX_ENDPOINTS} webhooks", details={"limit": MAX_ENDPOINTS}
        )
    return WebhookEndpoint(tenant=tenant, url=url, events=wanted, description=description.strip())


def webhook_list(*, tenant: Tenant) -> list[WebhookEndpoint]:
    return list(WebhookEndpoint.objects.for_tenant(tenant).order_by("created_at", "id"))


def webhook_get(*, tenant: Tenant, webhook_id: str) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.for_tenant(tenant).filter(pk=webhook_id).first()
    if endpoint is None:
        raise NotFound("No such webhook")
    return endpoint


def webhook_delete(*, tenant: Tenant, webhook_id: str) -> None:
    """Delete an endpoint with its delivery log (another tenant's id: 404)."""
    endpoint = webhook_get(tenant=tenant, webhook_id=webhook_id)
    with transaction.atomic():
        WebhookDelivery.objects.for_tenant(tenant).filter(endpoint=endpoint).delete()
        endpoint.delete()
    forget_tenants()


def webhook_enable(*, tenant: Tenant, webhook_id: str, now: datetime | None = None) -> None:
    """Enable a disabled endpoint again: its pending deliveries get a new 24 h (its events
    meanwhile, still kept, follow)."""
    now = resolve_now(now)
    endpoint = webhook_get(tenant=tenant, webhook_id=webhook_id)
    with transaction.atomic():
        WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
            disabled_at=None, disabled_reason="", failing_since=None
        )
        WebhookDelivery.objects.for_tenant(tenant).filter(
            endpoint=endpoint, state=DeliveryState.PENDING
        ).update(first_attempt_at=None, next_attempt_at=now)
    forget_tenants()


def delivery_resend(*, tenant: Tenant, delivery_id: int, now: datetime | None = None) -> None:
    """Send a delivery's event again (a new delivery, outside the per-memory order)."""
    now = resolve_now(now)
    old = WebhookDelivery.objects.for_tenant(tenant).filter(pk=delivery_id).first()
    if old is None:
        raise NotFound("No such delivery")
    WebhookDelivery.objects.create(
        tenant=tenant,
        endpoint_id=old.endpoint_id,
        event_id=old.event_id,
        position=old.position,
        event_type=old.event_type,
        memory_id=old.memory_id,
        resend=True,
        created_at=now,
        next_attempt_at=now,
    )


def webhook_json(endpoint: WebhookEndpoint) -> dict[str, Any]:
    return {
        "id": endpoint.pk,
        "url": endpoint.url,
        "events": list(endpoint.events),
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "created_at": iso(endpoint.created_at),
        "failing_since": iso(endpoint.failing_since),
        "last_success_at": iso(endpoint.last_success_at),
        "disabled_at": iso(endpoint.disabled_at),
        "disabled_reason": endpoint.disabled_reason,
    }

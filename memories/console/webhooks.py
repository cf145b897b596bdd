"""The console's Webhooks page (admins): endpoints, the secret shown once, the
delivery log with `Resend`, `Enable` for an endpoint that failing disabled. The same services
as REST (`memories.webhooks.endpoints`)."""

from __future__ import annotations

from django import forms
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.console import ConsoleRequest, operator_actor, require_role
from accounts.models import Role
from memories.console.view_helpers import done, refuse_on_form, render, service_errors
from memories.models import EVENT_TYPES, WebhookDelivery, WebhookEndpoint
from memories.webhooks import endpoints
from memoryhub.errors import DomainError

DELIVERIES_SHOWN = 100


class WebhookForm(forms.Form):
    url = forms.CharField(label="URL", max_length=2000, help_text="https:// and a public address")
    events = forms.MultipleChoiceField(
        label="Events",
        choices=[(t, t) for t in EVENT_TYPES],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None checked: every event",
    )
    description = forms.CharField(label="Description", max_length=200, required=False)


def _page(request: ConsoleRequest, **extra) -> dict:
    return {
        "section": "webhooks",
        "webhooks": endpoints.webhook_list(tenant=request.tenant),
        "form": extra.pop("form", None) or WebhookForm(),
        **extra,
    }


@require_role(Role.ADMIN)
def webhook_list_view(request: ConsoleRequest) -> HttpResponse:
    return render(request, "console/webhooks.html", _page(request), fragment="webhooks")


@require_role(Role.ADMIN)
@require_POST
def webhook_create_view(request: ConsoleRequest) -> HttpResponse:
    """`Add webhook`: the secret is in this one response and nowhere else, ever."""
    form = WebhookForm(request.POST)
    if form.is_valid():
        try:
            created = endpoints.webhook_create(
                tenant=request.tenant,
                url=form.cleaned_data["url"],
                events=form.cleaned_data["events"],
                description=form.cleaned_data["description"],
                actor=operator_actor(request),
            )
        except DomainError as exc:
            refuse_on_form(form, exc)
        else:
            context = _page(request, new_secret=created.secret, new_webhook=created.endpoint)
            response = render(request, "console/webhooks.html", context, fragment="webhooks")
            response["Cache-Control"] = "no-store"
            return response
    context = _page(request, form=form)
    return render(request, "console/webhooks.html", context, fragment="webhooks", status=422)


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda webhook_id: reverse("console:webhooks"))
def webhook_delete_view(request: ConsoleRequest, webhook_id: str) -> HttpResponse:
    endpoints.webhook_delete(tenant=request.tenant, webhook_id=webhook_id)
    return done(request, "Webhook deleted.", reverse("console:webhooks"))


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda webhook_id: reverse("console:webhooks"))
def webhook_enable_view(request: ConsoleRequest, webhook_id: str) -> HttpResponse:
    endpoints.webhook_enable(tenant=request.tenant, webhook_id=webhook_id)
    return done(request, "Webhook enabled again.", reverse("console:webhook", args=[webhook_id]))


@require_role(Role.ADMIN)
@service_errors(back=lambda webhook_id: reverse("console:webhooks"))
def webhook_detail(request: ConsoleRequest, webhook_id: str) -> HttpResponse:
    endpoint = endpoints.webhook_get(tenant=request.tenant, webhook_id=webhook_id)
    deliveries = (
        WebhookDelivery.objects.for_tenant(request.tenant)
        .filter(endpoint=endpoint)
        .order_by("-id")[:DELIVERIES_SHOWN]
    )
    context = {"section": "webhooks", "webhook": endpoint, "deliveries": list(deliveries)}
    return render(request, "console/webhook_detail.html", context, fragment="deliveries")


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda delivery_id: reverse("console:webhooks"))
def delivery_resend_view(request: ConsoleRequest, delivery_id: int) -> HttpResponse:
    delivery = WebhookDelivery.objects.for_tenant(request.tenant).filter(pk=delivery_id).first()
    endpoints.delivery_resend(tenant=request.tenant, delivery_id=delivery_id)
    back = reverse("console:webhook", args=[delivery.endpoint_id]) if delivery else ""
    return done(request, "Queued to be sent again.", back or reverse("console:webhooks"))


def disabled_webhooks(request: ConsoleRequest) -> list[WebhookEndpoint]:
    """For the dashboard: endpoints disabled after 24 h of failures, shown to admins."""
    membership = getattr(request, "membership", None)
    if membership is None or not membership.has_role(Role.ADMIN):
        return []
    return list(
        WebhookEndpoint.objects.for_tenant(request.tenant).filter(disabled_at__isnull=False)
    )

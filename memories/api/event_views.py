"""`GET /api/v1/events` (the change feed) and `/api/v1/webhooks`: thin views over
`memories.events.feed` and `memories.webhooks.endpoints`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from memories import validation
from memories.api import event_schema, schema
from memories.api.views import AgentAPIView, idempotent_response, query_subject
from memories.events.feed import events_page
from memories.webhooks import endpoints


class EventsView(AgentAPIView):
    @extend_schema(
        operation_id="events_list",
        description=(
            "The change feed: the events this key can see (the same owner/subject rule as its "
            "reads), oldest first, after the cursor `after`. `next_cursor` comes with every "
            "page, also an empty one: poll again with it. Events are kept "
            "MEMORYHUB_EVENT_RETENTION_DAYS (default 7)."
        ),
        summary="Events (a change feed)",
        parameters=[schema.SUBJECT_PARAM, *event_schema.EVENT_PARAMS],
        responses={200: event_schema.EventsResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        events, cursor = events_page(
            principal=request.user,
            after=request.query_params.get("after"),
            types=request.query_params.getlist("types"),
            limit=request.query_params.get("limit"),
            subject_id=query_subject(request),
            include_shared=request.query_params.get("include_shared"),
        )
        return Response({"ok": True, "events": events, "next_cursor": cursor})


class WebhooksView(AgentAPIView):
    @extend_schema(
        operation_id="webhooks_list",
        description=(
            "The tenant's webhook endpoints (admin scope, a key not bound to a subject). Secrets "
            "are never shown again."
        ),
        summary="Webhooks",
        responses={200: event_schema.WebhookListResponseSerializer, **schema.READ_ERRORS},
    )
    def get(self, request):
        request.user.require_tenant_wide("admin")
        hooks = endpoints.webhook_list(tenant=request.user.tenant)
        return Response({"ok": True, "webhooks": [endpoints.webhook_json(h) for h in hooks]})

    @extend_schema(
        operation_id="webhooks_create",
        description=(
            "Add an endpoint (admin scope, a key not bound to a subject: an endpoint receives "
            "every subject's events): `url` (https:// and a public address, checked again "
            "before every delivery), `events` (types; default all), `description`. The answer "
            "holds the signing `secret`, shown this once: each delivery's body is one event, "
            'signed as `MemoryHub-Signature: t=<unix>,v1=<hex HMAC-SHA256 of "t.body">`.'
        ),
        summary="Add a webhook",
        parameters=[schema.IDEMPOTENCY_PARAM],
        request=event_schema.WebhookCreateSerializer,
        responses={201: event_schema.WebhookCreatedResponseSerializer, **schema.WRITE_ERRORS},
    )
    def post(self, request):
        request.user.require_tenant_wide("admin")
        data = validation.require_object(request.data)

        def action(_):
            created = endpoints.webhook_create(
                tenant=request.user.tenant,
                url=data.get("url"),
                events=data.get("events"),
                description=data.get("description", ""),
                actor=request.user.actor,
            )
            body = {
                "ok": True,
                "webhook": endpoints.webhook_json(created.endpoint),
                "secret": created.secret,
            }
            return 201, body

        # A retry with the same Idempotency-Key gets the same endpoint and secret, never a
        # second endpoint; the kept response holds the secret encrypted, as the endpoint does.
        return idempotent_response(
            request,
            "webhook_create",
            data,
            action,
            seal=endpoints.seal_secret,
            unseal=endpoints.unseal_secret,
        )


class WebhookDetailView(AgentAPIView):
    @extend_schema(
        operation_id="webhooks_delete",
        description=(
            "Delete an endpoint and its delivery log (admin scope, a key not bound to a subject)."
        ),
        summary="Delete a webhook",
        request=None,
        responses={200: event_schema.WebhookDeletedResponseSerializer, **schema.WRITE_ERRORS},
    )
    def delete(self, request, webhook_id: str):
        request.user.require_tenant_wide("admin")
        endpoints.webhook_delete(tenant=request.user.tenant, webhook_id=webhook_id)
        return Response({"ok": True, "deleted": True})

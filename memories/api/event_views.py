"""`GET /api/v1/events` (the change feed) and `/api/v1/webhooks` (SPEC §14): thin views over
`memories.events.feed` and `memories.webhooks.endpoints`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from memories.api import event_schema, schema
from memories.api.views import AgentAPIView, query_subject
from memories.events.feed import events_page


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

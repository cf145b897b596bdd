"""OpenAPI descriptions of the change feed and webhook endpoints."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from memories.models import EVENT_TYPES, Scope


class EventSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="Monotonic: the feed's order.")
    type = serializers.ChoiceField(choices=EVENT_TYPES)
    tenant = serializers.CharField()
    agent = serializers.CharField(allow_null=True, help_text="The owner agent's slug.")
    subject_id = serializers.CharField(allow_null=True)
    scope = serializers.ChoiceField(
        choices=Scope.values,
        help_text="The memory's scope: `user` for a subject's user memory (no `agent`; seen by "
        "every agent acting for the subject, `data.source` `user`); `agent` otherwise, and for "
        "events that are not a memory's.",
    )
    memory_id = serializers.CharField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    occurred_at = serializers.DateTimeField()
    data = serializers.DictField(  # type: ignore[assignment]  # a field, like Serializer.data
        help_text="The public memory object as of the change (never purged content), or the "
        "extraction run's / erasure's summary."
    )


class EventsResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    events = EventSerializer(many=True)
    next_cursor = serializers.CharField(help_text="Pass as `after`; also on an empty page.")


EVENT_PARAMS = [
    OpenApiParameter(
        "after", OpenApiTypes.STR, OpenApiParameter.QUERY, description="A `next_cursor`."
    ),
    OpenApiParameter(
        "types",
        OpenApiTypes.STR,
        OpenApiParameter.QUERY,
        description="Event types, comma-separated (or repeated); default all.",
    ),
    OpenApiParameter(
        "limit", OpenApiTypes.INT, OpenApiParameter.QUERY, description="1–1000, default 100."
    ),
    OpenApiParameter(
        "include_shared",
        OpenApiTypes.BOOL,
        OpenApiParameter.QUERY,
        description="Also the events of the agents this one reads from (default true).",
    ),
]


class WebhookSerializer(serializers.Serializer):
    id = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField(), help_text="[]: every type.")
    description = serializers.CharField()
    enabled = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    failing_since = serializers.DateTimeField(allow_null=True)
    last_success_at = serializers.DateTimeField(allow_null=True)
    disabled_at = serializers.DateTimeField(allow_null=True)
    disabled_reason = serializers.CharField()


class WebhookCreateSerializer(serializers.Serializer):
    url = serializers.CharField(help_text="https:// and a public address.")
    events = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Event types (those of an event's `type`); default: all of them.",
    )
    description = serializers.CharField(required=False)


class WebhookListResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    webhooks = WebhookSerializer(many=True)


class WebhookCreatedResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    webhook = WebhookSerializer()
    secret = serializers.CharField(help_text="Shown once: verify `MemoryHub-Signature` with it.")


class WebhookDeletedResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    deleted = serializers.BooleanField()

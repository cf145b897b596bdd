"""OpenAPI description of the conversation endpoints (threads, messages, extraction,
subject erasure), in the style of `memories.api.schema`: these serializers describe JSON for
the schema only; `memories.formation` validates."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from memories.api.schema import (
    IDENTIFIER_PATTERN,
    NOT_BLANK,
    StrictRequestSerializer,
    TimestampInputField,
    identifier_field,
)
from memories.formation.ingest import EXTRACT_CHOICES, MAX_BATCH, MAX_MESSAGE_PAGE, MESSAGE_PAGE
from memories.models import MAX_MESSAGE_CHARS, Role


class MessageInSerializer(StrictRequestSerializer):
    """One message of a conversation."""

    role = serializers.ChoiceField(choices=[r.value for r in Role])
    content = serializers.RegexField(
        NOT_BLANK,
        max_length=MAX_MESSAGE_CHARS,
        help_text="Secret-shaped spans are replaced by `[redacted:<rule>]` before storage",
    )
    name = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=255, help_text="Speaker"
    )
    created_at = TimestampInputField(
        required=False,
        help_text="When it was said (default: now). Give it to resend a conversation safely: a "
        "message equal in role, content and created_at to one the thread holds is skipped",
    )


class IngestRequestSerializer(StrictRequestSerializer):
    """The body of `POST /api/v1/threads/{thread_id}/messages`."""

    # many=True passes the lengths on to the ListSerializer (the stubs do not know them).
    messages = MessageInSerializer(  # type: ignore[call-arg]
        many=True, min_length=1, max_length=MAX_BATCH
    )
    subject_id = identifier_field(help_text="The end user this conversation is with")
    extract = serializers.ChoiceField(
        choices=list(EXTRACT_CHOICES),
        required=False,
        allow_null=True,
        help_text="auto (default): once the thread is idle for the agent's "
        "`extraction_idle_seconds`; now: queue a run at once; off: store only",
    )


class MessagesQuerySerializer(serializers.Serializer):
    subject_id = identifier_field(allow_null=False)
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_MESSAGE_PAGE, default=MESSAGE_PAGE
    )
    cursor = serializers.CharField(required=False, help_text="`next_cursor` of the page before")


# The `extraction.state` values each response may carry (docs/formation.md: "Extraction states").
INGEST_STATES = ["scheduled", "queued", "off", "disabled"]
THREAD_STATES = [
    "queued",
    "running",
    "scheduled",
    "deferred",
    "done",
    "failed",
    "idle",
    "off",
    "disabled",
]
EXTRACT_STATES = ["queued", "running", "idle", "off", "disabled"]


class IngestExtractionSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=INGEST_STATES)
    due_at = serializers.DateTimeField(required=False, help_text="When `scheduled`")
    reason = serializers.CharField(required=False, help_text="Why nothing was scheduled")


class IngestResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    thread_id = serializers.CharField()
    accepted = serializers.IntegerField(min_value=0, help_text="Messages stored")
    duplicates = serializers.IntegerField(min_value=0, help_text="Messages the thread held already")
    redacted = serializers.IntegerField(min_value=0, help_text="Stored messages with a redaction")
    extraction = IngestExtractionSerializer()


class ThreadExtractionSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=THREAD_STATES)
    due_at = serializers.DateTimeField(allow_null=True, help_text="When `scheduled`/`deferred`")
    last_run_at = serializers.DateTimeField(allow_null=True)
    pending_messages = serializers.IntegerField(
        min_value=0, help_text="Messages no extraction has been through yet"
    )
    memories_added = serializers.IntegerField(min_value=0)
    memories_updated = serializers.IntegerField(min_value=0)


class ThreadSerializer(serializers.Serializer):
    thread_id = serializers.CharField()
    subject_id = serializers.CharField(allow_null=True)
    message_count = serializers.IntegerField(min_value=0)
    summary = serializers.CharField(allow_blank=True)
    last_message_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    extraction = ThreadExtractionSerializer()


class ThreadResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    thread = ThreadSerializer()


class MessageSerializer(serializers.Serializer):
    seq = serializers.IntegerField(min_value=1)
    role = serializers.ChoiceField(choices=[r.value for r in Role])
    content = serializers.CharField(help_text="As stored: secret spans redacted")
    name = serializers.CharField(allow_null=True)
    created_at = serializers.DateTimeField()
    redactions = serializers.ListField(
        child=serializers.CharField(), help_text="The secret rules whose spans were redacted"
    )


class MessagesResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    messages = MessageSerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class ExtractExtractionSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=EXTRACT_STATES)
    run_id = serializers.IntegerField(required=False, help_text="When `queued` or `running`")
    reason = serializers.CharField(required=False, help_text="Why nothing was queued")


class ExtractResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    thread_id = serializers.CharField()
    extraction = ExtractExtractionSerializer()


class ErasureResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    subject_id = serializers.CharField()
    memories = serializers.IntegerField(min_value=0, help_text="Purged, or tombstoned")
    threads = serializers.IntegerField(min_value=0, help_text="Deleted, or emptied")
    messages = serializers.IntegerField(min_value=0, help_text="Deleted")
    purged = serializers.BooleanField()


SUBJECT_PATH_PARAM = OpenApiParameter(
    "subject_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=IDENTIFIER_PATTERN,
    description="The end user to erase",
)
PURGE_PARAM = OpenApiParameter(
    "purge",
    OpenApiTypes.BOOL,
    OpenApiParameter.QUERY,
    description="Erase irreversibly (as a memory's purge) and delete the threads; otherwise "
    "tombstone the memories and delete the messages",
)

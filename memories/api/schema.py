"""OpenAPI description of the agent API (drf-spectacular): request and response shapes.

These serializers only describe JSON for the schema at `/api/schema/`; they validate nothing.
Validation lives in `memories.validation`, shared with MCP, so one rule answers both paths.
"""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from memories.ids import MEMORY_ID_RE


class ApiKeyAuthScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.authentication.ApiKeyAuthentication"
    name = "BearerKey"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "mh_ API key",
            "description": "`Authorization: Bearer mh_…` (an agent's API key).",
        }


TIMESTAMP_INPUT = {
    "oneOf": [
        {"type": "string", "format": "date-time"},
        {"type": "integer", "description": "Unix milliseconds"},
    ],
    "nullable": True,
}


@extend_schema_field(TIMESTAMP_INPUT)
class TimestampInputField(serializers.Field):
    """ISO 8601 or Unix milliseconds; null where the operation allows it."""


# --- the memory object ------------------------------------------------------------------------


class MentionSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    type = serializers.CharField(max_length=64, required=False)


class MentionOutSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField()


class MemorySerializer(serializers.Serializer):
    id = serializers.CharField(help_text="`mem_` + ULID")
    key = serializers.CharField(allow_null=True)
    category = serializers.CharField()
    kind = serializers.CharField()
    text = serializers.CharField(allow_blank=True)
    data = serializers.DictField(allow_null=True)
    tags = serializers.ListField(child=serializers.CharField())
    subject_id = serializers.CharField(allow_null=True)
    thread_id = serializers.CharField(allow_null=True)
    importance = serializers.FloatField(min_value=0, max_value=1)
    confidence = serializers.FloatField(min_value=0, max_value=1)
    capture_mode = serializers.ChoiceField(choices=["explicit", "inferred"])
    source_provider = serializers.CharField(allow_null=True)
    mentions = MentionOutSerializer(many=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    last_confirmed_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    version = serializers.IntegerField(min_value=1)
    status = serializers.ChoiceField(choices=["active", "tombstoned", "evicted", "expired"])
    review_state = serializers.ChoiceField(choices=["none", "pending", "approved"])
    size_bytes = serializers.IntegerField(min_value=0)
    agent = serializers.CharField(allow_null=True, help_text="Owner slug; null for workspace")
    source = serializers.CharField(help_text="`own`, `workspace` or `shared:<agent-slug>`")


# --- requests ---------------------------------------------------------------------------------


class StoreRequestSerializer(serializers.Serializer):
    text = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=settings.MAX_TEXT_CHARS,
        help_text="Required unless `data` is given",
    )
    key = serializers.CharField(required=False, allow_null=True, max_length=255)
    category = serializers.RegexField(r"^[a-z0-9_-]{1,40}$", required=False, allow_null=True)
    kind = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$", required=False, allow_null=True
    )
    data = serializers.DictField(required=False, allow_null=True)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, allow_null=True, max_length=32
    )
    subject_id = serializers.CharField(required=False, allow_null=True, max_length=255)
    thread_id = serializers.CharField(required=False, allow_null=True, max_length=255)
    session_id = serializers.CharField(
        required=False, allow_null=True, max_length=255, help_text="Alias of `thread_id`"
    )
    importance = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    confidence = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    capture_mode = serializers.ChoiceField(
        choices=["explicit", "inferred"], required=False, allow_null=True
    )
    source_provider = serializers.CharField(required=False, allow_null=True, max_length=100)
    mentions = MentionSerializer(many=True, required=False, allow_null=True)
    ttl = serializers.RegexField(
        r"^\d{1,9}[smhd]$", required=False, allow_null=True, help_text="e.g. 30s, 15m, 24h, 7d"
    )
    expires_at = TimestampInputField(required=False)
    last_confirmed_at = TimestampInputField(required=False)
    dedup_policy = serializers.ChoiceField(
        choices=["ask", "skip_if_near", "insert"], required=False, allow_null=True
    )
    expected_version = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    expected_updated_at = TimestampInputField(required=False)


class UpdateRequestSerializer(serializers.Serializer):
    text = serializers.CharField(
        required=False, allow_blank=True, max_length=settings.MAX_TEXT_CHARS
    )
    data = serializers.DictField(required=False, allow_null=True)
    tags = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False, allow_null=True, max_length=32
    )
    category = serializers.RegexField(r"^[a-z0-9_-]{1,40}$", required=False)
    kind = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$", required=False, allow_null=True
    )
    importance = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    confidence = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    mentions = MentionSerializer(many=True, required=False, allow_null=True)
    ttl = serializers.RegexField(r"^\d{1,9}[smhd]$", required=False, allow_null=True)
    expires_at = TimestampInputField(required=False, help_text="null removes the expiry")
    last_confirmed_at = TimestampInputField(required=False)
    expected_version = serializers.IntegerField(required=False, allow_null=True, min_value=0)
    expected_updated_at = TimestampInputField(required=False)


class ListQuerySerializer(serializers.Serializer):
    category = serializers.CharField(required=False)
    kind = serializers.CharField(required=False)
    tag = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="Repeat for AND"
    )
    subject_id = serializers.CharField(required=False)
    thread_id = serializers.CharField(required=False)
    updated_after = serializers.DateTimeField(required=False)
    include_shared = serializers.BooleanField(required=False, default=True)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)
    cursor = serializers.CharField(required=False)


# --- responses --------------------------------------------------------------------------------


class NearDuplicateSerializer(serializers.Serializer):
    memory_id = serializers.CharField()
    text = serializers.CharField(allow_blank=True)
    similarity = serializers.FloatField(min_value=0, max_value=1)


class PreviouslyCorrectedSerializer(serializers.Serializer):
    memory_id = serializers.CharField()
    text = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(allow_blank=True)
    tombstoned_at = serializers.DateTimeField(allow_null=True)
    similarity = serializers.FloatField(min_value=0, max_value=1)


class StoreResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    memory_id = serializers.CharField()
    message = serializers.ChoiceField(choices=["Ok", "Updated", "Already remembered"])
    version = serializers.IntegerField()
    memory = MemorySerializer()
    near_duplicates = NearDuplicateSerializer(many=True, required=False)
    previously_corrected = PreviouslyCorrectedSerializer(many=True, required=False)


class MemoryResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    memory = MemorySerializer()


class RecallResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    memory = MemorySerializer(allow_null=True)


class ListResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    memories = MemorySerializer(many=True)
    next_cursor = serializers.CharField(allow_null=True)


class KeysResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    keys = serializers.ListField(child=serializers.CharField())


class ForgetResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    deleted = serializers.BooleanField()
    memory_id = serializers.CharField(allow_null=True)


class ThreadEndResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    removed = serializers.IntegerField(min_value=0)


class WhoAmISerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    tenant = serializers.CharField()
    agent = serializers.CharField()
    scopes = serializers.ListField(child=serializers.CharField())
    subject_id = serializers.CharField(allow_null=True)


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()
    details = serializers.DictField()


class ErrorSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    error = ErrorBodySerializer()


# --- shared pieces of operation descriptions --------------------------------------------------

_ERROR_TEXT = {
    400: "INVALID_INPUT",
    401: "UNAUTHENTICATED",
    403: "SCOPE_DENIED",
    404: "NOT_FOUND",
    405: "Method not allowed",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    422: "SECRET_REJECTED or IDEMPOTENCY_MISMATCH",
    429: "QUOTA_EXCEEDED or RATE_LIMITED",
    500: "DATABASE_ERROR",
    502: "EMBEDDING_ERROR",
    503: "BACKEND_UNAVAILABLE (Retry-After)",
}


def errors(*codes: int) -> dict[int, OpenApiResponse]:
    return {c: OpenApiResponse(ErrorSerializer, description=_ERROR_TEXT[c]) for c in codes}


READ_ERRORS = errors(400, 401, 403, 404, 405, 413, 429, 500, 503)
WRITE_ERRORS = errors(400, 401, 403, 404, 405, 409, 413, 422, 429, 500, 502, 503)

SUBJECT_PARAM = OpenApiParameter(
    "subject_id", OpenApiTypes.STR, OpenApiParameter.QUERY, description="Act for this subject"
)
CATEGORY_PARAM = OpenApiParameter("category", OpenApiTypes.STR, OpenApiParameter.QUERY)
MEMORY_ID_PARAM = OpenApiParameter(
    "memory_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=MEMORY_ID_RE.pattern,
    description="`mem_` + ULID",
)
KEY_PARAM = OpenApiParameter("key", OpenApiTypes.STR, OpenApiParameter.PATH)
THREAD_PARAM = OpenApiParameter("thread_id", OpenApiTypes.STR, OpenApiParameter.PATH)
IDEMPOTENCY_PARAM = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    description="Replays the first response for 24 h (per tenant)",
)
IF_MATCH_PARAM = OpenApiParameter(
    "If-Match", OpenApiTypes.STR, OpenApiParameter.HEADER, description='Version, e.g. "3"'
)
FORGET_PARAMS = [
    SUBJECT_PARAM,
    OpenApiParameter("reason", OpenApiTypes.STR, OpenApiParameter.QUERY),
    OpenApiParameter(
        "purge",
        OpenApiTypes.BOOL,
        OpenApiParameter.QUERY,
        description="Erase irreversibly (admin scope)",
    ),
]

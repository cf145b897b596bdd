"""OpenAPI description of the agent API (drf-spectacular): request and response shapes.

These serializers only describe JSON for the schema at `/api/schema/`; they validate nothing.
Validation lives in `memories.validation`, shared with MCP, so one rule answers both paths.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension, OpenApiSerializerExtension
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema_field
from rest_framework import serializers

from memories import idempotency, validation
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
        {
            "type": "integer",
            "description": "Unix milliseconds",
            "minimum": 0,
            "maximum": 253402300799999,  # 9999-12-31T23:59:59.999Z
        },
    ],
    "nullable": True,
}


@extend_schema_field(TIMESTAMP_INPUT)
class TimestampInputField(serializers.Field):
    """ISO 8601 or Unix milliseconds; null where the operation allows it."""


# --- input rules, as `memories.validation` applies them -----------------------------------------

# Opaque ids (key, subject_id, thread_id): no control characters, at most 255 characters.
IDENTIFIER_PATTERN = r"^[^\x00-\x1f\x7f]+$"
# Tags are trimmed, lower-cased and have inner white space turned into `-` by the server; what
# is left must match its tag rule ([a-z0-9][a-z0-9:_./-]{0,63}). `Billing Issue` is accepted.
TAG_INPUT_PATTERN = r"^\s*[A-Za-z0-9][A-Za-z0-9:_./\s-]{0,63}$"
# `ttl`: a positive integer and a unit (`memoryhub.durations`).
TTL_PATTERN = r"^[1-9][0-9]{0,8}[smhd]$"
NOT_BLANK = r"\S"  # unanchored: at least one character that is not white space


KEY_PREFIX_HELP = (
    "Only memories whose `key` starts with this string, matched literally (`%` and `_` are no "
    "wildcards): a namespace such as `langgraph/users/42/`"
)


def ecma_pattern(regex: re.Pattern) -> str:
    r"""A Python pattern as OpenAPI (ECMA-262) writes it: its `\Z` is `$` there, where `$`
    matches only at the very end."""
    return regex.pattern.replace(r"\Z", "$")


def identifier_field(**kwargs: Any) -> serializers.RegexField:
    kwargs.setdefault("required", False)
    kwargs.setdefault("allow_null", True)
    return serializers.RegexField(IDENTIFIER_PATTERN, max_length=validation.MAX_ID_CHARS, **kwargs)


def category_field(**kwargs: Any) -> serializers.RegexField:
    kwargs.setdefault(
        "help_text",
        "core, daily, conversation (needs a thread_id), workspace, archival, or a custom name",
    )
    return serializers.RegexField(ecma_pattern(validation.CATEGORY_RE), **kwargs)


def kind_field(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(validation.KIND_RE.pattern, **kwargs)


def tags_field(**kwargs: Any) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.RegexField(TAG_INPUT_PATTERN),
        max_length=validation.MAX_TAGS,
        help_text="Trimmed, lower-cased, inner white space → `-`, duplicates dropped",
        **kwargs,
    )


def ttl_field(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(
        TTL_PATTERN,
        required=False,
        allow_null=True,
        help_text="Lifetime from now: a positive integer and s, m, h or d (30s, 15m, 24h, 7d); "
        "not together with `expires_at`",
        **kwargs,
    )


def not_together(*names: str) -> dict[str, Any]:
    """Object rule: at most one of these fields (the server answers 400 when both are given)."""
    return {"not": {"required": list(names)}}


EXCLUSIVE_FIELDS = [
    not_together("ttl", "expires_at"),
    not_together("expected_version", "expected_updated_at"),
]


class StrictRequestSerializer(serializers.Serializer):
    """A request body the server validates strictly: unknown fields are 400 INVALID_INPUT, so the
    schema says `additionalProperties: false`. `schema_extra` adds object-level rules."""

    schema_extra: ClassVar[dict[str, Any]] = {}


class StrictRequestExtension(OpenApiSerializerExtension):
    target_class = StrictRequestSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        mapped = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        return {**mapped, "additionalProperties": False, **self.target.schema_extra}


# --- the memory object ------------------------------------------------------------------------


class MentionSerializer(StrictRequestSerializer):
    """An entity the memory mentions."""

    name = serializers.RegexField(NOT_BLANK, max_length=200, help_text="Not blank")
    type = serializers.RegexField(
        NOT_BLANK, max_length=64, required=False, help_text="Not blank; default `entity`"
    )


class MentionOutSerializer(serializers.Serializer):
    name = serializers.CharField()
    type = serializers.CharField()


class EvidenceSerializer(serializers.Serializer):
    thread_id = serializers.CharField()
    messages = serializers.ListField(child=serializers.IntegerField(min_value=1))
    run_id = serializers.IntegerField()


class MemorySerializer(serializers.Serializer):
    id = serializers.CharField(help_text="`mem_` + ULID")
    key = serializers.CharField(allow_null=True)
    category = serializers.CharField()
    kind = serializers.CharField()
    scope = serializers.ChoiceField(
        choices=["agent", "user"],
        help_text="agent: the agent's memory; user: the subject's, across every agent",
    )
    text = serializers.CharField(allow_blank=True)
    data = serializers.DictField(allow_null=True)  # type: ignore[assignment]  # a field
    tags = serializers.ListField(child=serializers.CharField())
    subject_id = serializers.CharField(allow_null=True)
    thread_id = serializers.CharField(allow_null=True)
    importance = serializers.FloatField(min_value=0, max_value=1)
    confidence = serializers.FloatField(min_value=0, max_value=1)
    capture_mode = serializers.ChoiceField(choices=["explicit", "inferred"])
    source_provider = serializers.CharField(allow_null=True)
    mentions = MentionOutSerializer(many=True)
    occurred_at = serializers.DateTimeField(allow_null=True)
    expires_at = serializers.DateTimeField(allow_null=True)
    last_confirmed_at = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    version = serializers.IntegerField(min_value=1)
    status = serializers.ChoiceField(choices=["active", "tombstoned", "evicted", "expired"])
    review_state = serializers.ChoiceField(choices=["none", "pending", "approved"])
    size_bytes = serializers.IntegerField(min_value=0)
    agent = serializers.CharField(
        allow_null=True, help_text="Owner slug; null for workspace and user memories"
    )
    source = serializers.CharField(  # type: ignore[assignment]  # a field, like Field.source
        help_text="`own`, `workspace`, `user` or `shared:<agent-slug>`"
    )
    evidence = EvidenceSerializer(
        allow_null=True,
        help_text="For a memory formed from a conversation: the messages it came from; null "
        "for explicit stores",
    )


# --- requests ---------------------------------------------------------------------------------


class StoreRequestSerializer(StrictRequestSerializer):
    """The body of `POST /api/v1/memories`: `text` (or `data`) and optional fields."""

    schema_extra: ClassVar[dict[str, Any]] = {
        # `text` (not blank) unless `data` (an object) is given.
        "anyOf": [
            {
                "required": ["text"],
                "properties": {"text": {"type": "string", "pattern": NOT_BLANK}},
            },
            {"required": ["data"], "properties": {"data": {"type": "object"}}},
        ],
        "allOf": [
            *EXCLUSIVE_FIELDS,
            not_together("thread_id", "session_id"),
        ],
    }

    text = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=settings.MAX_TEXT_CHARS,
        help_text="Required (not blank) unless `data` is given",
    )
    key = identifier_field(help_text="Stable key: storing it again updates that memory")
    category = category_field(required=False, allow_null=True)
    kind = kind_field(required=False, allow_null=True)
    scope = serializers.ChoiceField(
        choices=["agent", "user"],
        required=False,
        allow_null=True,
        help_text="user: the subject's memory across every agent of the tenant (needs a "
        "subject; not workspace or conversation). Default: agent",
    )
    data = serializers.DictField(  # type: ignore[assignment]  # a field, like Serializer.data
        required=False,
        allow_null=True,
        help_text="Checked against the kind's schema when it has one",
    )
    tags = tags_field(required=False, allow_null=True)
    subject_id = identifier_field()
    thread_id = identifier_field()
    session_id = identifier_field(help_text="Alias of `thread_id`")
    importance = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    confidence = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    capture_mode = serializers.ChoiceField(
        choices=["explicit", "inferred"], required=False, allow_null=True
    )
    source_provider = serializers.CharField(required=False, allow_null=True, max_length=100)
    mentions = MentionSerializer(many=True, required=False, allow_null=True)
    occurred_at = TimestampInputField(
        required=False, help_text="When the event happened; null: not temporal"
    )
    ttl = ttl_field()
    expires_at = TimestampInputField(
        required=False, help_text="In the future; null: never (overrides the agent's default TTL)"
    )
    last_confirmed_at = TimestampInputField(required=False)
    dedup_policy = serializers.ChoiceField(
        choices=["ask", "skip_if_near", "insert"], required=False, allow_null=True
    )
    expected_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=validation.MAX_VERSION,
        help_text="Needs `key` or a single kind. 0: create only",
    )
    expected_updated_at = TimestampInputField(
        required=False, help_text="Needs `key` or a single kind. null: create only"
    )


class UpdateRequestSerializer(StrictRequestSerializer):
    """The body of `PATCH /api/v1/memories/{id}`: only the fields to change."""

    schema_extra: ClassVar[dict[str, Any]] = {"allOf": EXCLUSIVE_FIELDS}

    text = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=settings.MAX_TEXT_CHARS,
        help_text="Blank only if the memory has `data`",
    )
    data = serializers.DictField(required=False, allow_null=True)  # type: ignore[assignment]
    tags = tags_field(required=False, allow_null=True)
    category = category_field(
        required=False,
        help_text="Not into or out of `workspace`; `conversation` only for a memory with a "
        "thread_id",
    )
    kind = kind_field(required=False, allow_null=True)
    importance = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    confidence = serializers.FloatField(required=False, allow_null=True, min_value=0, max_value=1)
    mentions = MentionSerializer(many=True, required=False, allow_null=True)
    occurred_at = TimestampInputField(
        required=False, help_text="When the event happened; null: not temporal"
    )
    ttl = ttl_field()
    expires_at = TimestampInputField(
        required=False, help_text="In the future; null removes the expiry"
    )
    last_confirmed_at = TimestampInputField(required=False)
    expected_version = serializers.IntegerField(
        required=False, allow_null=True, min_value=0, max_value=validation.MAX_VERSION
    )
    expected_updated_at = TimestampInputField(required=False)


class ListQuerySerializer(serializers.Serializer):
    category = category_field(required=False)
    kind = kind_field(required=False)
    tag = serializers.ListField(
        child=serializers.RegexField(TAG_INPUT_PATTERN), required=False, help_text="Repeat for AND"
    )
    subject_id = identifier_field(allow_null=False)
    thread_id = identifier_field(allow_null=False)
    key_prefix = identifier_field(allow_null=False, help_text=KEY_PREFIX_HELP)
    updated_after = serializers.DateTimeField(required=False)
    include_shared = serializers.BooleanField(required=False, default=True)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200, default=50)
    cursor = serializers.CharField(required=False, help_text="`next_cursor` of the page before")


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
    action = serializers.ChoiceField(
        choices=["created", "updated", "replaced", "skipped"],
        help_text="replaced: a single kind's one record took the new text and data",
    )
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
    as_of = serializers.DateTimeField(
        help_text="The walk's horizon: every write stamped at or before it is in the walk; "
        "sync next with updated_after=<as_of>."
    )


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
    "subject_id",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    pattern=IDENTIFIER_PATTERN,
    description="Act for this subject",
)
KEY_PREFIX_PARAM = OpenApiParameter(
    "key_prefix",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    pattern=IDENTIFIER_PATTERN,
    description=KEY_PREFIX_HELP,
)
CATEGORY_PARAM = OpenApiParameter(
    "category",
    OpenApiTypes.STR,
    OpenApiParameter.QUERY,
    pattern=ecma_pattern(validation.CATEGORY_RE),
)
MEMORY_ID_PARAM = OpenApiParameter(
    "memory_id",
    OpenApiTypes.STR,
    OpenApiParameter.PATH,
    pattern=MEMORY_ID_RE.pattern,
    description="`mem_` + ULID",
)
KEY_PARAM = OpenApiParameter(
    "key", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=IDENTIFIER_PATTERN
)
THREAD_PARAM = OpenApiParameter(
    "thread_id", OpenApiTypes.STR, OpenApiParameter.PATH, pattern=IDENTIFIER_PATTERN
)
IDEMPOTENCY_PARAM = OpenApiParameter(
    "Idempotency-Key",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    pattern=idempotency.KEY_RE.pattern,
    description="1–255 printable ASCII characters. The first success is replayed for 24 h to "
    "the same API key; the same key with another body (or from another API key) is 422 "
    "IDEMPOTENCY_MISMATCH",
)
IF_MATCH_PARAM = OpenApiParameter(
    "If-Match",
    OpenApiTypes.STR,
    OpenApiParameter.HEADER,
    pattern=r'^(W/)?"?[0-9]{1,9}"?$',
    description='The version the change is based on, e.g. "3" (the ETag of a read)',
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

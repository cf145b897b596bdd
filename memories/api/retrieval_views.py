"""`POST /api/v1/search` and `POST /api/v1/hydrate`: thin views over `memories.retrieval`.

The services validate the raw body themselves (the MCP tools hand them the same dicts), so the
serializers below only describe the JSON for the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from memories.api import schema
from memories.api.views import AgentAPIView
from memories.retrieval.hydrate import hydrate_body
from memories.retrieval.params import ARCHIVAL_MODES, MAX_LIMIT, MAX_QUERY_CHARS, MODES
from memories.retrieval.search import memory_search


class SearchRequestSerializer(schema.StrictRequestSerializer):
    """The body of `POST /api/v1/search`: `query` and optional filters."""

    schema_extra: ClassVar[dict[str, Any]] = schema.not_together("thread_id", "session_id")

    query = serializers.RegexField(schema.NOT_BLANK, max_length=MAX_QUERY_CHARS)
    mode = serializers.ChoiceField(MODES, default="hybrid")
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=10)
    min_score = serializers.FloatField(
        min_value=0, max_value=1, required=False, help_text="On `quality.relevance`"
    )
    category = schema.category_field(required=False)
    categories = serializers.ListField(child=schema.category_field(), required=False, max_length=64)
    kind = schema.kind_field(required=False)
    tags = schema.tags_field(required=False)
    subject_id = schema.identifier_field(allow_null=False)
    thread_id = schema.identifier_field(
        allow_null=False, help_text="Also search this thread's conversation memories"
    )
    session_id = schema.identifier_field(allow_null=False, help_text="Alias of `thread_id`")
    include_shared = serializers.BooleanField(default=True)
    include_history = serializers.BooleanField(default=False)
    key_prefix = schema.identifier_field(allow_null=False, help_text=schema.KEY_PREFIX_HELP)


class SearchQualitySerializer(serializers.Serializer):
    relevance = serializers.FloatField()
    confidence = serializers.FloatField()


class SearchContextSerializer(serializers.Serializer):
    when = serializers.DateTimeField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    mentions = serializers.ListField(child=serializers.DictField())
    tags = serializers.ListField(child=serializers.CharField())
    isLatest = serializers.BooleanField()  # noqa: N815 - the API's LLM-facing name
    lastConfirmedAt = serializers.DateTimeField(  # noqa: N815
        help_text="When the fact was last confirmed (freshness)"
    )


class SearchHitSerializer(serializers.Serializer):
    id = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    kind = serializers.CharField()
    category = serializers.CharField()
    quality = SearchQualitySerializer()
    # Fields named like the Serializer's own attributes (DRF's metaclass takes them as fields).
    data = serializers.DictField(  # type: ignore[assignment]
        help_text="`text` plus the memory's data fields"
    )
    context = SearchContextSerializer()  # type: ignore[assignment]
    source = serializers.CharField(  # type: ignore[assignment]
        help_text="own | workspace | user | shared:<agent-slug>"
    )


class SearchResponseSerializer(serializers.Serializer):
    success = serializers.BooleanField()
    ok = serializers.BooleanField()
    searchedAt = serializers.DateTimeField()  # noqa: N815
    memories = SearchHitSerializer(many=True)


class HydrateRequestSerializer(schema.StrictRequestSerializer):
    """The body of `POST /api/v1/hydrate`: every field optional."""

    schema_extra: ClassVar[dict[str, Any]] = schema.not_together("thread_id", "session_id")

    subject_id = schema.identifier_field(allow_null=False)
    thread_id = schema.identifier_field(
        allow_null=False, help_text="Also load this thread's conversation memories"
    )
    session_id = schema.identifier_field(allow_null=False, help_text="Alias of `thread_id`")
    budget_bytes = serializers.IntegerField(
        min_value=0,
        max_value=settings.DATA_UPLOAD_MAX_MEMORY_SIZE * 16,
        required=False,
        help_text="Default: the agent's `hydration_budget_bytes`",
    )
    query = serializers.CharField(required=False, max_length=MAX_QUERY_CHARS)
    archival_mode = serializers.ChoiceField(ARCHIVAL_MODES, default="tool_only")
    archival_limit = serializers.IntegerField(min_value=0, max_value=MAX_LIMIT, default=5)
    archival_min_score = serializers.FloatField(min_value=0, max_value=1, default=0.3)
    include_agent_core = serializers.BooleanField(default=True)
    include_user_core = serializers.BooleanField(default=True)
    format = serializers.ChoiceField(["json", "markdown"], default="json")
    explain = serializers.BooleanField(default=False)


class HydrateEntrySerializer(schema.MemorySerializer):
    reason = serializers.ChoiceField(["core", "recent"])


class ArchivalMatchSerializer(schema.MemorySerializer):
    score = serializers.FloatField(min_value=0, max_value=1)


class OmittedSerializer(serializers.Serializer):
    memory_id = serializers.CharField()
    reason = serializers.ChoiceField(["windowed", "too_big", "core_limit"])


class HydrateResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    entries = HydrateEntrySerializer(many=True)
    archival = ArchivalMatchSerializer(
        many=True,
        help_text="With archival_mode=auto and a query: the best archival matches, outside "
        "the budget",
    )
    bytes_used = serializers.IntegerField()
    budget_bytes = serializers.IntegerField()
    markdown = serializers.CharField(required=False, help_text="with format=markdown")
    omitted = OmittedSerializer(many=True, required=False, help_text="with explain=true")


class SearchView(AgentAPIView):
    @extend_schema(
        operation_id="search",
        summary="Search memories (hybrid full-text + vector, keyword or semantic)",
        description=(
            "Ranks the live memories this key can see, inside PostgreSQL: `hybrid` mixes "
            "full-text and vector similarity, `keyword` and `semantic` use one of them. "
            "`conversation` memories are candidates only when `thread_id` names their thread. "
            "`include_history` also returns older texts of visible memories "
            "(`isLatest: false`). The answer is the LLM-facing format (`quality.relevance` "
            "0–1, `data.text`, `context`, `source`)."
        ),
        request=SearchRequestSerializer,
        responses={200: SearchResponseSerializer, **schema.READ_ERRORS},
    )
    def post(self, request):
        return Response(memory_search(principal=request.user, data=request.data))


class HydrateView(AgentAPIView):
    @extend_schema(
        operation_id="hydrate",
        summary="Load the context for the start of a run (core first, then recent)",
        description=(
            "What an agent loads at the start of a run, within `budget_bytes` (by "
            "`size_bytes`): the two core blocks first, newest first, each at most the agent's "
            "`core_max_entries` and `core_max_chars` — the subject's user-scoped `core` "
            "memories (`include_user_core`), then the agent's own `core` memories, of the "
            "subject and subject-less (`include_agent_core`); then the newest other memories "
            "(not `archival`; `conversation` only of `thread_id`). With `archival_mode=auto` "
            "and a `query`, the best archival matches come in their own list `archival`, "
            "outside the budget (at most `archival_limit`, above `archival_min_score`, within "
            "the agent's `archival_max_chars`). An entry that does not fit is skipped, a "
            "smaller later one may still fit. `explain` lists what was left out and why "
            "(`core_limit`: a core block's limits); `format=markdown` adds a compact context "
            'block (archival matches under "Possibly relevant").'
        ),
        request=HydrateRequestSerializer,
        responses={200: HydrateResponseSerializer, **schema.READ_ERRORS},
    )
    def post(self, request):
        return Response(hydrate_body(principal=request.user, data=request.data))

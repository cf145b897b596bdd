"""`POST /api/v1/search` and `POST /api/v1/hydrate`: thin views over `memories.search`.

The services validate the raw body themselves (the MCP tools hand them the same dicts), so the
serializers below only describe the JSON for the OpenAPI schema.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from memories.api import schema
from memories.search import hydrate_body, memory_search


class SearchRequestSerializer(serializers.Serializer):
    query = serializers.CharField()
    mode = serializers.ChoiceField(["hybrid", "semantic", "keyword"], default="hybrid")
    limit = serializers.IntegerField(min_value=1, max_value=100, default=10)
    min_score = serializers.FloatField(min_value=0, max_value=1, required=False)
    category = serializers.CharField(required=False)
    categories = serializers.ListField(child=serializers.CharField(), required=False)
    kind = serializers.CharField(required=False)
    tags = serializers.ListField(child=serializers.CharField(), required=False)
    subject_id = serializers.CharField(required=False)
    thread_id = serializers.CharField(required=False)
    include_shared = serializers.BooleanField(default=True)
    include_history = serializers.BooleanField(default=False)


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
    isLatest = serializers.BooleanField()  # noqa: N815 - the SPEC's LLM-facing name


class SearchHitSerializer(serializers.Serializer):
    id = serializers.CharField()
    key = serializers.CharField(allow_null=True)
    kind = serializers.CharField()
    category = serializers.CharField()
    quality = SearchQualitySerializer()
    data = serializers.DictField(help_text="`text` plus the memory's data fields")
    context = SearchContextSerializer()
    source = serializers.CharField(help_text="own | workspace | shared:<agent-slug>")


class SearchResponseSerializer(serializers.Serializer):
    success = serializers.BooleanField()
    ok = serializers.BooleanField()
    searchedAt = serializers.DateTimeField()  # noqa: N815
    memories = SearchHitSerializer(many=True)


class HydrateRequestSerializer(serializers.Serializer):
    subject_id = serializers.CharField(required=False)
    thread_id = serializers.CharField(required=False)
    budget_bytes = serializers.IntegerField(min_value=0, required=False)
    query = serializers.CharField(required=False)
    archival_mode = serializers.ChoiceField(["tool_only", "auto", "off"], default="tool_only")
    archival_limit = serializers.IntegerField(min_value=0, max_value=100, default=5)
    archival_min_score = serializers.FloatField(min_value=0, max_value=1, default=0.3)
    include_agent_core = serializers.BooleanField(default=True)
    include_user_core = serializers.BooleanField(default=True)
    format = serializers.ChoiceField(["json", "markdown"], default="json")
    explain = serializers.BooleanField(default=False)


class HydrateEntrySerializer(schema.MemorySerializer):
    reason = serializers.ChoiceField(["core", "recent", "archival_match"])


class OmittedSerializer(serializers.Serializer):
    memory_id = serializers.CharField()
    reason = serializers.ChoiceField(["windowed", "too_big"])


class HydrateResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    entries = HydrateEntrySerializer(many=True)
    bytes_used = serializers.IntegerField()
    budget_bytes = serializers.IntegerField()
    markdown = serializers.CharField(required=False, help_text="with format=markdown")
    omitted = OmittedSerializer(many=True, required=False, help_text="with explain=true")


class SearchView(APIView):
    @extend_schema(
        operation_id="search",
        summary="Search memories (hybrid full-text + vector, keyword or semantic)",
        request=SearchRequestSerializer,
        responses={200: SearchResponseSerializer, **schema.READ_ERRORS},
    )
    def post(self, request):
        return Response(memory_search(principal=request.user, data=request.data))


class HydrateView(APIView):
    @extend_schema(
        operation_id="hydrate",
        summary="Load the context for the start of a run (core first, then recent)",
        request=HydrateRequestSerializer,
        responses={200: HydrateResponseSerializer, **schema.READ_ERRORS},
    )
    def post(self, request):
        return Response(hydrate_body(principal=request.user, data=request.data))

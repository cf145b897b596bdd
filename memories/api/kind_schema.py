"""OpenAPI description of the kind registry's endpoints (docs/memory-model.md#kinds)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework import serializers

from memories.api.schema import StrictRequestSerializer
from memories.services.kind_changes import MAX_DESCRIPTION_CHARS

KIND_NAME_PARAM = OpenApiParameter(
    "name",
    str,
    OpenApiParameter.PATH,
    pattern=r"^[A-Za-z][A-Za-z0-9_]{0,59}$",
    description="The kind's name, e.g. `UserProfile`",
)


class KindSerializer(serializers.Serializer):
    name = serializers.CharField()
    cardinality = serializers.ChoiceField(choices=["single", "multiple"])
    memory_type = serializers.ChoiceField(choices=["semantic", "episodic", "procedural"])
    description = serializers.CharField(allow_blank=True)
    schema = serializers.DictField(
        allow_null=True, help_text="JSON Schema (draft 2020-12) of a memory's `data`"
    )
    default_category = serializers.CharField(allow_null=True)
    tool = serializers.CharField(
        allow_null=True,
        help_text="The MCP tool that stores this kind (`create_<snake_case name>`); null "
        "for a kind without a schema",
    )
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class KindRequestSerializer(StrictRequestSerializer):
    """The body of `PUT /api/v1/kinds/{name}`: the whole definition (omitted fields take
    their defaults)."""

    cardinality = serializers.ChoiceField(
        choices=["single", "multiple"],
        required=False,
        allow_null=True,
        help_text="single: one live record per owner and subject, replaced by each store; "
        "multiple (default): appended",
    )
    memory_type = serializers.ChoiceField(
        choices=["semantic", "episodic", "procedural"], required=False, allow_null=True
    )
    description = serializers.CharField(
        required=False, allow_blank=True, allow_null=True, max_length=MAX_DESCRIPTION_CHARS
    )
    schema = serializers.DictField(
        required=False,
        allow_null=True,
        help_text="A JSON Schema (draft 2020-12) describing an object; references only within "
        "itself",
    )
    default_category = serializers.RegexField(
        r"^[a-z0-9_-]{1,40}$", required=False, allow_null=True
    )


class KindResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    kind = KindSerializer()


class KindsResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    kinds = KindSerializer(many=True)


class KindDeletedSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    deleted = serializers.BooleanField()

"""`GET /api/v1/`: the API's own table of contents, for a person (or a client) finding their way:
every endpoint with its method and a one-line summary, where the docs and the schema are, and
how to authenticate. No key needed: it says nothing about any tenant and holds no secret.

The endpoints and their summaries are read from the OpenAPI schema that `/api/schema/` serves
(drf-spectacular, built once per process on the first request here), so the index and the docs
never disagree and a new route appears here without an edit.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

PREFIX = "/api/v1/"


def _summary(operation: dict[str, Any]) -> str:
    text = operation.get("summary") or operation.get("description") or ""
    return " ".join(text.split()).split(". ")[0].rstrip(".")


@cache
def endpoints() -> tuple[dict[str, str], ...]:
    """`{"method", "path", "summary"}` of every operation under /api/v1/ but this index."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    return tuple(
        {"method": method.upper(), "path": path, "summary": _summary(operation)}
        for path, operations in schema["paths"].items()
        if path.startswith(PREFIX) and path != PREFIX
        for method, operation in operations.items()
    )


class ApiIndexEndpointSerializer(serializers.Serializer):
    method = serializers.CharField(help_text="GET, POST, PUT, PATCH or DELETE.")
    path = serializers.CharField(help_text="The path template, e.g. /api/v1/memories/{memory_id}.")
    summary = serializers.CharField()


class ApiIndexResponseSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    name = serializers.CharField()
    version = serializers.CharField()
    authentication = serializers.CharField(help_text="How to authenticate.")
    docs = serializers.URLField(help_text="The browsable API docs.")
    schema = serializers.URLField(help_text="The OpenAPI schema.")
    mcp = serializers.URLField(help_text="The MCP endpoint (streamable HTTP).")
    endpoints = ApiIndexEndpointSerializer(many=True)


class ApiIndexView(APIView):
    """This index: the endpoints of the agent API, its docs, and how to authenticate."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="api_index",
        summary="This index of the API (no key needed)",
        responses={200: ApiIndexResponseSerializer},
    )
    def get(self, request: Request) -> Response:
        return Response(
            {
                "ok": True,
                "name": "MemoryHub agent API",
                "version": "v1",
                "authentication": "Authorization: Bearer <API key>: an agent's key (mh_…), "
                "from the console's agent page or `manage.py create_api_key`",
                "docs": request.build_absolute_uri("/api/docs/"),
                "schema": request.build_absolute_uri("/api/schema/"),
                "mcp": request.build_absolute_uri("/mcp"),
                "endpoints": list(endpoints()),
            }
        )

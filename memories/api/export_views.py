"""`GET /api/v1/export.md`: the calling agent's memories as Markdown, streamed."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

from memories import selectors, validation
from memories.api import schema
from memories.api.views import AgentAPIView
from memories.clock import resolve_now
from memories.markdown_export import export_filename, export_markdown
from memories.visibility import source_label


class ExportMarkdownView(AgentAPIView):
    """Live memories visible to the key's agent, grouped by category then key, text fenced."""

    @extend_schema(
        operation_id="export_markdown",
        parameters=[
            OpenApiParameter("subject_id", str, description="Subject to export for"),
            OpenApiParameter("category", str, description="Only this category"),
            OpenApiParameter("include_tombstoned", bool, description="Also tombstoned memories"),
            OpenApiParameter("include_shared", bool, description="Also agents in reads_from"),
        ],
        responses={(200, "text/markdown"): OpenApiTypes.STR, **schema.READ_ERRORS},
    )
    def get(self, request):
        principal = request.user
        principal.require_scope("read")
        params = request.query_params
        # Parsed up front: once the stream has started, an error can no longer be a 400.
        subject_id = principal.resolve_subject(
            validation.identifier(params.get("subject_id"), "subject_id")
        )
        category = validation.category(params.get("category") or None, default="")
        include_tombstoned = validation.parse_bool(
            params.get("include_tombstoned"), "include_tombstoned", default=False
        )
        include_shared = validation.parse_bool(
            params.get("include_shared"), "include_shared", default=True
        )
        now = resolve_now()
        rows = selectors.memory_export(
            principal=principal,
            subject_id=subject_id,
            category=category,
            include_tombstoned=include_tombstoned,
            include_shared=include_shared,
            now=now,
        )
        agent = principal.agent
        stream = export_markdown(
            rows,
            title=f"Memories of {principal.tenant.slug} / {agent.slug}",
            source_for=lambda m: source_label(m, agent),
            generated_at=now,
            filters={
                "subject_id": subject_id or "",
                "category": category,
                "include_tombstoned": "true" if include_tombstoned else "",
            },
        )
        response = StreamingHttpResponse(stream, content_type="text/markdown; charset=utf-8")
        filename = export_filename(principal.tenant.slug, agent.slug, now)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

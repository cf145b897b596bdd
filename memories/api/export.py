"""`GET /api/v1/export.md` (SPEC §4 Export): the calling agent's memories as Markdown, streamed."""

from __future__ import annotations

import re

from django.db.models import Q
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema

from memories.api import schema
from memories.api.views import AgentAPIView
from memories.clock import resolve_now
from memories.export import export_filename, export_markdown
from memories.models import Memory, Status
from memories.visibility import reads_from_ids, source_label, visible_q
from memoryhub.errors import InvalidInput

_CATEGORY = re.compile(r"^[a-z0-9_-]{1,40}$")
_TRUE, _FALSE = {"true", "1", "yes"}, {"false", "0", "no", ""}


def _flag(params, name: str, default: bool) -> bool:
    value = params.get(name)
    if value is None:
        return default
    value = value.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidInput(f"{name} must be true or false", field=name)


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
        requested = params.get("subject_id") or None
        # Checked up front: once the stream has started, an error can no longer be a 400.
        if requested is not None and ("\x00" in requested or len(requested) > 255):
            raise InvalidInput("Invalid subject_id", field="subject_id")
        subject_id = principal.resolve_subject(requested)
        category = params.get("category") or None
        if category is not None and not _CATEGORY.match(category):
            raise InvalidInput("Invalid category", field="category")
        include_tombstoned = _flag(params, "include_tombstoned", False)
        include_shared = _flag(params, "include_shared", True)
        now = resolve_now()

        qs = Memory.objects.for_tenant(principal.tenant).filter(
            visible_q(agent=principal.agent, subject_id=subject_id, include_shared=include_shared)
        )
        live = Q(status=Status.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
        qs = qs.filter(live | Q(status=Status.TOMBSTONED) if include_tombstoned else live)
        if category:
            qs = qs.filter(category=category)

        agent = principal.agent
        reads_from_ids(agent)  # cached once, not per row
        stream = export_markdown(
            qs,
            title=f"Memories of {principal.tenant.slug} / {agent.slug}",
            source_for=lambda m: source_label(m, agent),
            generated_at=now,
            filters={
                "subject_id": subject_id or "",
                "category": category or "",
                "include_tombstoned": "true" if include_tombstoned else "",
            },
        )
        response = StreamingHttpResponse(stream, content_type="text/markdown; charset=utf-8")
        filename = export_filename(principal.tenant.slug, agent.slug, now)
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response

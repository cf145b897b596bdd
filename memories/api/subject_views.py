"""`DELETE /api/v1/subjects/{subject_id}` (docs/formation.md): a thin view over
`services.erasure.subject_erase`."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from memories import validation
from memories.api import conversation_schema, schema
from memories.api.views import AgentAPIView
from memories.services import erasure


class SubjectView(AgentAPIView):
    @extend_schema(
        operation_id="subjects_erase",
        description=(
            "Erases an end user from the key's tenant, across all of its agents (admin scope). "
            "With `purge=true` every memory of the subject is purged (text, data and embedding "
            "erased for good, also from its history; ids and timestamps stay) and its threads "
            "are deleted with their messages and extraction runs. Without it the memories are "
            "tombstoned (an operator can restore them) and the messages deleted; the threads "
            "stay, emptied. A key bound to a subject may erase only that subject. Counts what "
            "this call changed: running it again answers zeros."
        ),
        summary="Erase a subject (right to erasure)",
        parameters=[conversation_schema.SUBJECT_PATH_PARAM, conversation_schema.PURGE_PARAM],
        request=None,
        responses={200: conversation_schema.ErasureResponseSerializer, **schema.WRITE_ERRORS},
    )
    def delete(self, request, subject_id: str):
        purge = validation.parse_bool(request.query_params.get("purge"), "purge", default=False)
        result = erasure.subject_erase(principal=request.user, subject_id=subject_id, purge=purge)
        return Response(
            {
                "ok": True,
                "subject_id": result.subject_id,
                "memories": result.memories,
                "threads": result.threads,
                "messages": result.messages,
                "purged": result.purged,
            }
        )

from rest_framework.response import Response
from rest_framework.views import APIView


class WhoAmIView(APIView):
    """The calling agent and its key's scopes (handy for checking a key)."""

    def get(self, request):
        principal = request.user
        return Response(
            {
                "ok": True,
                "tenant": principal.tenant.slug,
                "agent": principal.agent.slug,
                "scopes": sorted(principal.scopes),
                "subject_id": principal.bound_subject,
            }
        )

from django.db import connection
from django.http import JsonResponse
from django.views.decorators.http import require_GET

from memoryhub import db_outage
from memoryhub.errors import RETRY_AFTER_SECONDS


def unavailable() -> JsonResponse:
    response = JsonResponse({"ok": False, "database": "unavailable"}, status=503)
    response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


@require_GET
def healthz(request):
    """Liveness plus a round trip to the database; 503 when it does not answer."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception:  # noqa: BLE001 - any failure means "not ok", and nothing more is said
        db_outage.report()
        return unavailable()
    return JsonResponse({"ok": True, "database": "ok"})

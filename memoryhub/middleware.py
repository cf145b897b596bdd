"""Keeps every `/api/` and `/mcp` failure in the JSON envelope, even outside DRF views.

Django answers an over-size body, an unknown URL, a `Host` not in ALLOWED_HOSTS or a database
outage with an HTML page of its own; an agent must always get the envelope of SPEC §4 instead.
The middleware is the outermost one, so it sees the request before any other calls
`request.get_host()` (SecurityMiddleware does, for its HTTPS redirect).
"""

from __future__ import annotations

import logging

from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from memoryhub.errors import (
    DomainError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    error_for_exception,
    json_error_response,
)

# Where Django itself reports a disallowed Host (its SuspiciousOperation loggers).
host_logger = logging.getLogger("django.security.DisallowedHost")

API_PREFIXES = ("/api/", "/healthz")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


class ApiErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request.path):
            try:
                request.get_host()
            except DisallowedHost as exc:
                host_logger.warning("%s", exc)
                return json_error_response(InvalidInput("Invalid Host header", field="Host"))
            length = request.META.get("CONTENT_LENGTH")
            from django.conf import settings

            if length and length.isdigit() and int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
                return json_error_response(
                    PayloadTooLarge(details={"limit_bytes": settings.DATA_UPLOAD_MAX_MEMORY_SIZE})
                )
        response = self.get_response(request)
        if (
            is_api_path(request.path)
            and response.status_code == 404
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            return json_error_response(NotFound("No such resource"))
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_api_path(request.path):
            return None
        if isinstance(exception, RequestDataTooBig):
            return json_error_response(PayloadTooLarge())
        err = error_for_exception(exception)
        if err is None:
            return None
        assert isinstance(err, DomainError)
        return json_error_response(err)

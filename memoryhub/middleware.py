"""Keeps every `/api/` and `/mcp` failure in the JSON envelope, even outside DRF views.

Django answers an over-size body, an unknown URL or a database outage with an HTML page of its
own; an agent must always get the envelope of SPEC §4 instead.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from memoryhub.errors import (
    DomainError,
    NotFound,
    PayloadTooLarge,
    error_for_exception,
    json_error_response,
)

API_PREFIXES = ("/api/", "/healthz")
# `POST /api/v1/threads/{thread_id}/messages` takes up to 100 messages of 32,000 characters.
MESSAGES_PATH = re.compile(r"^/api/v1/threads/.+/messages/?$", re.DOTALL)


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def body_limit(path: str) -> int:
    """The largest request body `path` accepts, in bytes: `MEMORYHUB_MAX_BODY_BYTES`, and the
    larger `MEMORYHUB_MAX_MESSAGES_BODY_BYTES` for a conversation's messages (and `/mcp`,
    whose `memory_ingest` carries the same batch)."""
    if MESSAGES_PATH.match(path) or path.rstrip("/") == "/mcp":
        return max(settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


class ApiErrorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if is_api_path(request.path):
            length = request.META.get("CONTENT_LENGTH")
            limit = body_limit(request.path)
            if length and length.isdigit() and int(length) > limit:
                return json_error_response(PayloadTooLarge(details={"limit_bytes": limit}))
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

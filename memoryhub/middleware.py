"""Keeps every `/api/` and `/mcp` failure in the JSON envelope, even outside DRF views.

Django answers an over-size body, an unknown URL, a `Host` not in ALLOWED_HOSTS or a database
outage with an HTML page of its own; an agent must always get the API's error envelope instead.
The middleware is the outermost one, so it sees the request before any other calls
`request.get_host()` (SecurityMiddleware does, for its HTTPS redirect).
"""

from __future__ import annotations

import logging
import re

from csp.middleware import CSPMiddleware
from django.conf import settings
from django.core.exceptions import BadRequest, DisallowedHost, RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

from memories.validation import reject_nul
from memoryhub import db_outage
from memoryhub.errors import (
    RETRY_AFTER_SECONDS,
    BackendUnavailable,
    DomainError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    error_for_exception,
    json_error_response,
)

# Where Django itself reports a disallowed Host (its SuspiciousOperation loggers).
host_logger = logging.getLogger("django.security.DisallowedHost")
# `POST /api/v1/threads/{thread_id}/messages` takes up to 100 messages of 32,000 characters.
MESSAGES_PATH = re.compile(r"^/api/v1/threads/.+/messages/?$", re.DOTALL)

API_PREFIXES = ("/api/", "/healthz")


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


def body_limit(path: str) -> int:
    """The largest request body `path` accepts, in bytes: `MEMORYHUB_MAX_BODY_BYTES` (`/mcp`
    included), and the larger `MEMORYHUB_MAX_MESSAGES_BODY_BYTES` for a conversation's
    messages."""
    if MESSAGES_PATH.fullmatch(path):
        return max(settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE


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

    def process_view(self, request: HttpRequest, view_func, view_args, view_kwargs):
        """A path parameter PostgreSQL cannot hold (a NUL, from `%00`) is refused before the
        view runs: 400 INVALID_INPUT naming it under /api/, a 400 page elsewhere."""
        for name, value in view_kwargs.items():
            try:
                reject_nul(value, name)
            except InvalidInput as err:
                if is_api_path(request.path):
                    return json_error_response(err)
                raise BadRequest(err.message) from None
        return None

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


OUTAGE_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Database unavailable · MemoryHub</title></head>
<body><h1>The database is unavailable</h1>
<p>MemoryHub cannot reach its database right now. It is being restarted; try again in a few
seconds.</p></body></html>
"""


class DatabaseOutageMiddleware:
    """While the database is known to be down (`memoryhub.db_outage`), every request is answered
    503 at once, without waiting on a connection: the envelope (`BACKEND_UNAVAILABLE`) under
    /api/, the health body on /healthz, a short page elsewhere; all with `Retry-After`.
    Static files are served before this (WhiteNoise): they need no database."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if db_outage.is_down():
            return outage_response(request.path)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> None:
        if isinstance(exception, OperationalError | InterfaceError):
            db_outage.report()


def outage_response(path: str) -> HttpResponse:
    from memoryhub.health import unavailable

    if path == "/healthz":
        return unavailable()
    if is_api_path(path):
        return json_error_response(BackendUnavailable())
    response = HttpResponse(OUTAGE_PAGE, status=503)
    response["Retry-After"] = RETRY_AFTER_SECONDS
    return response


class ConsoleNoStoreMiddleware:
    """Console pages show memory content: no cache (browser, proxy or back button) keeps a copy
    (`Cache-Control: no-store`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.path.startswith("/console/"):
            patch_cache_control(response, no_store=True)
        return response


class ContentSecurityPolicyMiddleware(CSPMiddleware):
    """django-csp's middleware, for the pages that get a policy. Under its
    `EXCLUDE_URL_PREFIXES` (the API) it sets no header, yet it built the policy and its
    report-only twin for every request there; with no report-only policy configured, such a
    request now passes straight through."""

    def __init__(self, get_response):
        super().__init__(get_response)
        policy = getattr(settings, "CONTENT_SECURITY_POLICY", None) or {}
        report_only = getattr(settings, "CONTENT_SECURITY_POLICY_REPORT_ONLY", None)
        excluded = () if report_only else policy.get("EXCLUDE_URL_PREFIXES") or ()
        self.excluded = tuple(excluded)

    def __call__(self, request: HttpRequest):
        async_mode = self.async_mode  # type: ignore[attr-defined]  # MiddlewareMixin's
        if self.excluded and not async_mode and request.path_info.startswith(self.excluded):
            return self.get_response(request)
        return super().__call__(request)

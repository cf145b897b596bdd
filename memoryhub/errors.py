"""The API's one error envelope: `{"ok": false, "error": {"code", "message", "details"}}`.

Services raise `DomainError` subclasses; the DRF exception handler (and the middleware, for
failures outside DRF) turn every failure into that envelope. Nothing here echoes user input
that might be a secret.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

from memoryhub import db_outage
from memoryhub.renderers import FastJSONRenderer

logger = logging.getLogger(__name__)


class DomainError(Exception):
    code = "INVALID_INPUT"
    status = 400
    message = "Invalid input"

    def __init__(
        self,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.message = message or self.message
        self.details = details or {}
        self.headers = headers or {}
        super().__init__(self.message)


class InvalidInput(DomainError):
    code, status, message = "INVALID_INPUT", 400, "Invalid input"

    def __init__(self, message: str | None = None, *, field: str | None = None, **kwargs):
        details = kwargs.pop("details", None) or {}
        if field is not None:
            details.setdefault("field", field)
        super().__init__(message, details=details, **kwargs)


# The challenge every 401 carries (RFC 6750): REST, MCP and DRF's authenticate_header.
WWW_AUTHENTICATE = 'Bearer realm="memoryhub"'


class Unauthenticated(DomainError):
    code, status, message = "UNAUTHENTICATED", 401, "Missing, malformed, revoked or expired API key"

    def __init__(self, message: str | None = None, **kwargs):
        kwargs["headers"] = {"WWW-Authenticate": WWW_AUTHENTICATE, **(kwargs.get("headers") or {})}
        super().__init__(message, **kwargs)


class ScopeDenied(DomainError):
    code, status, message = "SCOPE_DENIED", 403, "This key may not do that"


class NotFound(DomainError):
    code, status, message = "NOT_FOUND", 404, "No such memory"


class Conflict(DomainError):
    code, status, message = "CONFLICT", 409, "The memory has changed since you read it"


class PayloadTooLarge(DomainError):
    code, status, message = "PAYLOAD_TOO_LARGE", 413, "Request body is too large"


class IdempotencyMismatch(DomainError):
    code, status, message = (
        "IDEMPOTENCY_MISMATCH",
        422,
        "This Idempotency-Key was used with a different body",
    )


class SecretRejected(DomainError):
    code, status, message = "SECRET_REJECTED", 422, "A secret-shaped value was found"


class QuotaExceeded(DomainError):
    code, status, message = "QUOTA_EXCEEDED", 429, "Quota exceeded"


class RateLimited(DomainError):
    code, status, message = "RATE_LIMITED", 429, "Too many requests"


class EmbeddingError(DomainError):
    code, status, message = "EMBEDDING_ERROR", 502, "The embedding backend failed"


# Seconds a client should wait before retrying a 503 (the embedded database, restarted by
# `serve`, is back within about two seconds of a crash).
RETRY_AFTER_SECONDS = "5"


class BackendUnavailable(DomainError):
    code, status, message = "BACKEND_UNAVAILABLE", 503, "The database is unavailable"

    def __init__(self, message: str | None = None, **kwargs):
        kwargs["headers"] = {"Retry-After": RETRY_AFTER_SECONDS, **(kwargs.get("headers") or {})}
        super().__init__(message, **kwargs)


class DatabaseFailure(DomainError):
    code, status, message = "DATABASE_ERROR", 500, "Database error"


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message, "details": details or {}}}


def error_for_exception(exc: BaseException) -> DomainError | None:
    """Map any exception we know how to describe onto a DomainError (None: not ours)."""
    if isinstance(exc, DomainError):
        return exc
    if isinstance(exc, OperationalError | InterfaceError):
        db_outage.report()
        return BackendUnavailable()
    if isinstance(exc, DatabaseError):
        logger.exception("database error")
        return DatabaseFailure()
    if isinstance(exc, drf_exceptions.ParseError):
        return InvalidInput("Malformed JSON body", details={"field": "body"})
    if isinstance(exc, drf_exceptions.UnsupportedMediaType):
        return InvalidInput(
            "Send JSON with Content-Type: application/json", details={"field": "body"}
        )
    if isinstance(exc, drf_exceptions.ValidationError):
        return InvalidInput("Validation failed", details=_validation_details(exc.detail))
    if isinstance(exc, drf_exceptions.NotAuthenticated | drf_exceptions.AuthenticationFailed):
        return Unauthenticated()
    if isinstance(exc, drf_exceptions.PermissionDenied):
        return ScopeDenied(str(exc.detail) if exc.detail else None)
    if isinstance(exc, drf_exceptions.NotFound):
        return NotFound()
    if isinstance(exc, drf_exceptions.MethodNotAllowed):
        err = InvalidInput(f"Method {exc.args[0] if exc.args else ''} not allowed".strip())
        err.status = 405
        return err
    if isinstance(exc, drf_exceptions.Throttled):
        wait = int(exc.wait or 1)  # type: ignore[attr-defined]  # set by Throttled()
        return RateLimited(headers={"Retry-After": str(wait)})
    return None


def _validation_details(detail: Any) -> dict[str, Any]:
    if isinstance(detail, dict):
        fields = {
            k: [str(m) for m in (v if isinstance(v, list) else [v])] for k, v in detail.items()
        }
        first = next(iter(fields), None)
        return {"field": first, "errors": fields}
    return {
        "errors": {
            "non_field_errors": [str(m) for m in (detail if isinstance(detail, list) else [detail])]
        }
    }


def _finish(response: Response | HttpResponse, err: DomainError) -> None:
    for name, value in err.headers.items():
        response[name] = value
    # Django's request logger would write "<reason>: <path>" for every 4xx/5xx, and API paths
    # carry what the client chose (a key in `by-key/…`, a thread id): possibly a pasted secret,
    # which is never logged. A client's error is the client's; server faults are logged where
    # they happen (`database error`, `unhandled API error`).
    response._has_been_logged = True  # type: ignore[union-attr]


def error_response(err: DomainError) -> Response:
    response = Response(envelope(err.code, err.message, err.details), status=err.status)
    _finish(response, err)
    return response


def json_error_response(err: DomainError) -> HttpResponse:
    """The envelope outside DRF (middleware), in the very bytes DRF's renderer would write."""
    body = FastJSONRenderer().render(envelope(err.code, err.message, err.details))
    response = HttpResponse(body, status=err.status, content_type="application/json")
    _finish(response, err)
    return response


def api_exception_handler(exc: BaseException, context: dict) -> Response | None:
    err = error_for_exception(exc)
    if err is None:
        logger.exception("unhandled API error", exc_info=exc)
        err = DomainError("Internal error")
        err.code, err.status = "INTERNAL_ERROR", 500
    return error_response(err)

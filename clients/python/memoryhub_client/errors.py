"""One exception class per MemoryHub error code (docs/api.md#errors), each carrying the body's
`code`, `message` and `details` and the HTTP `status`."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx


class MemoryHubError(Exception):
    """Base of every error the client raises. `code` is the API's error code (or
    `CONNECTION_ERROR` / `UNEXPECTED_RESPONSE`), `details` the error's details object,
    `status` the HTTP status (None when no response arrived)."""

    code: str = "UNEXPECTED_RESPONSE"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: dict[str, Any] | None = None,
        status: int | None = None,
        headers: httpx.Headers | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details or {}
        self.status = status
        self.headers = headers if headers is not None else httpx.Headers()

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def field(self) -> str | None:
        """The input field the error names, when it names one."""
        value = self.details.get("field")
        return value if isinstance(value, str) else None


class _RetryAfter:
    @property
    def retry_after(self) -> float | None:
        """Seconds the server asked to wait (`Retry-After`), when it said."""
        headers: httpx.Headers = self.headers  # type: ignore[attr-defined]
        return parse_retry_after(headers.get("Retry-After"))


class InvalidInputError(MemoryHubError):
    code = "INVALID_INPUT"


class UnauthenticatedError(MemoryHubError):
    code = "UNAUTHENTICATED"


class ScopeDeniedError(MemoryHubError):
    code = "SCOPE_DENIED"


class NotFoundError(MemoryHubError):
    code = "NOT_FOUND"


class ConflictError(MemoryHubError):
    code = "CONFLICT"

    @property
    def current_version(self) -> int | None:
        """The memory's version now (None when a create-only key simply exists)."""
        value = self.details.get("current_version")
        return value if isinstance(value, int) else None


class PayloadTooLargeError(MemoryHubError):
    code = "PAYLOAD_TOO_LARGE"


class IdempotencyMismatchError(MemoryHubError):
    code = "IDEMPOTENCY_MISMATCH"


class SecretRejectedError(MemoryHubError):
    code = "SECRET_REJECTED"

    @property
    def rule(self) -> str | None:
        """The secret rule that matched (the value itself is never echoed)."""
        value = self.details.get("rule")
        return value if isinstance(value, str) else None


class QuotaExceededError(MemoryHubError):
    code = "QUOTA_EXCEEDED"


class RateLimitedError(_RetryAfter, MemoryHubError):
    code = "RATE_LIMITED"


class EmbeddingError(MemoryHubError):
    code = "EMBEDDING_ERROR"


class BackendUnavailableError(_RetryAfter, MemoryHubError):
    code = "BACKEND_UNAVAILABLE"


class DatabaseError(MemoryHubError):
    code = "DATABASE_ERROR"


class MemoryHubConnectionError(MemoryHubError):
    """No answer: the connection failed (or timed out) on every attempt; the httpx error is
    the `__cause__`."""

    code = "CONNECTION_ERROR"


ERRORS_BY_CODE: dict[str, type[MemoryHubError]] = {
    cls.code: cls
    for cls in (
        InvalidInputError,
        UnauthenticatedError,
        ScopeDeniedError,
        NotFoundError,
        ConflictError,
        PayloadTooLargeError,
        IdempotencyMismatchError,
        SecretRejectedError,
        QuotaExceededError,
        RateLimitedError,
        EmbeddingError,
        BackendUnavailableError,
        DatabaseError,
    )
}


def parse_retry_after(value: str | None) -> float | None:
    """`Retry-After` in seconds (MemoryHub sends delta-seconds; an HTTP date is honoured too)."""
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def error_from_response(response: httpx.Response) -> MemoryHubError:
    """The exception for an error response: the class of its code, or the base class when the
    body is not MemoryHub's envelope (a proxy's HTML page, say)."""
    try:
        body = response.json()
        error = body["error"]
        code, message = str(error["code"]), str(error.get("message") or error["code"])
        details = error.get("details") if isinstance(error.get("details"), dict) else {}
    except (ValueError, KeyError, TypeError):
        return MemoryHubError(
            f"HTTP {response.status_code} without a MemoryHub error body",
            status=response.status_code,
            headers=response.headers,
        )
    cls = ERRORS_BY_CODE.get(code, MemoryHubError)
    return cls(
        message, code=code, details=details, status=response.status_code, headers=response.headers
    )

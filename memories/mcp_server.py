"""The MCP endpoint (`/mcp`): the server of `memories.mcp` over streamable HTTP.

Authentication is the same Bearer API key as REST, checked before the MCP app sees the request:
no valid key → 401 with the REST error body, and no tool runs; the same per-key rate limit
applies. The principal travels to the tools in the ASGI scope (`calls.PRINCIPAL_SCOPE_KEY`).
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from mcp.server.transport_security import TransportSecuritySettings
from rest_framework.exceptions import Throttled

from accounts.authentication import authenticate_key, bearer_token
from accounts.principal import Principal
from memories.mcp import tools  # noqa: F401 - registers the memory tools
from memories.mcp.calls import PRINCIPAL_SCOPE_KEY
from memories.mcp.server import mcp
from memories.ratelimit import KeyRateThrottle
from memoryhub.errors import DomainError, envelope, error_for_exception
from memoryhub.web_pool import web_executor

MCP_PATH = "/mcp"


def _transport_security() -> TransportSecuritySettings:
    # Host and Origin are checked before a request reaches the SDK (`memoryhub.asgi`), with
    # Django's ALLOWED_HOSTS rules (`.example.com` included) and answers in our envelope.
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _build_app():
    # Stateless + JSON responses: any web worker can answer any request (no session affinity).
    # The body limit is `memoryhub.asgi`'s, answered in the envelope before the SDK reads the
    # body: the SDK's own (4 MiB by default, a plain-text 413) must never be the smaller one.
    return mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=_transport_security(),
        max_request_body_size=max(settings.DATA_UPLOAD_MAX_MEMORY_SIZE, 4 * 1024 * 1024),
    )


_current = {"app": None}


def _mcp_app():
    if _current["app"] is None:
        _current["app"] = _build_app()
    return _current["app"]


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _authenticate(raw: str | None) -> Principal:
    """The key's principal, under the same per-key rate limit as REST (one request = one HTTP
    request to /mcp, as one REST call is)."""
    close_old_connections()
    throttle = KeyRateThrottle()
    try:
        principal = authenticate_key(raw)
        # The throttle reads the request's user only (and counts on this thread's connection).
        allowed = throttle.allow_request(SimpleNamespace(user=principal), None)
    finally:
        close_old_connections()
    if not allowed:
        raise Throttled(throttle.wait())
    return principal


async def mcp_application(scope, receive, send):
    """The SDK's app behind the same Bearer-key check as the REST API."""
    if scope["type"] == "lifespan":
        # The SDK's session manager runs once per instance: each server start gets a fresh app.
        _current["app"] = _build_app()
        await _current["app"](scope, receive, send)
        return
    if scope["type"] != "http":
        await _mcp_app()(scope, receive, send)
        return
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    try:
        principal = await sync_to_async(
            _authenticate, thread_sensitive=False, executor=web_executor()
        )(bearer_token(headers.get("authorization")))
    except DomainError as err:
        await _send_json(
            send,
            err.status,
            envelope(err.code, err.message, err.details),
            [(b"www-authenticate", b'Bearer realm="memoryhub"')],
        )
        return
    except Exception as exc:  # noqa: BLE001 - database down etc.: the same envelope as REST
        err = error_for_exception(exc)  # type: ignore[misc]  # not the handler's above
        if err is None:
            raise
        await _send_json(
            send,
            err.status,
            envelope(err.code, err.message, err.details),
            [(k.lower().encode(), v.encode()) for k, v in err.headers.items()],
        )
        return
    scope = dict(scope)
    scope[PRINCIPAL_SCOPE_KEY] = principal
    await _mcp_app()(scope, receive, send)

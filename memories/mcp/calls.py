"""What every MCP tool shares: the authenticated principal of the request, the arguments as the
client sent them, and a service call run in a worker thread with domain errors turned into the
REST error envelope."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import ValidationError

from accounts.principal import Principal
from memoryhub.errors import DomainError, InvalidInput, envelope, error_for_exception
from memoryhub.web_pool import web_executor

# Where `memories.mcp_server` leaves the request's principal, in the ASGI scope.
PRINCIPAL_SCOPE_KEY = "memoryhub.principal"

# The arguments of the tool call being run, as sent (see `memories.mcp.server`).
ARGUMENTS: ContextVar[dict[str, Any]] = ContextVar("memoryhub_mcp_arguments")


def tool_error(err: DomainError) -> ToolError:
    return ToolError(json.dumps(envelope(err.code, err.message, err.details)))


def invalid_arguments(exc: ValidationError) -> InvalidInput:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    return InvalidInput(f"'{field}': {first['msg']}", field=field)


def arguments() -> dict[str, Any]:
    """This call's arguments as the client sent them: what the services validate."""
    return dict(ARGUMENTS.get())


def request_principal(request) -> Principal | None:
    """The principal the transport's guard authenticated for this HTTP request."""
    return request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None


def principal_of(ctx) -> Principal:
    """The calling agent of a tool (`ctx`: the SDK's tool `Context`)."""
    principal = request_principal(ctx.request_context.request)
    if principal is None:  # the ASGI guard makes this unreachable over HTTP
        raise ToolError(json.dumps(envelope("UNAUTHENTICATED", "Missing API key")))
    return principal


_T = TypeVar("_T")


async def call(fn: Callable[..., _T], /, **kwargs: Any) -> _T:
    """Run a sync service call in a worker thread (calls run in parallel, each with a database
    connection of its thread); map domain errors to tool errors."""

    def run():
        close_old_connections()
        try:
            return fn(**kwargs)
        finally:
            close_old_connections()

    try:
        return await sync_to_async(run, thread_sensitive=False, executor=web_executor())()
    except Exception as exc:  # noqa: BLE001 - every failure becomes the REST error envelope
        err = error_for_exception(exc)
        if err is None:
            raise
        assert isinstance(err, DomainError)
        raise tool_error(err) from None

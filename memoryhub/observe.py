"""One observation per request: the access log line and the HTTP metrics.

Served by uvicorn, a request is timed by the ASGI app (`memoryhub.asgi`) from its arrival to
its response's last byte, wait for a thread of the pool included; `ObserveMiddleware` (the
outermost Django middleware) fills in what only Django knows — the route (the URL pattern,
never the path: a path holds ids, keys and subjects) and the tenant and agent — in the
request's `RequestInfo`, which travels in the ASGI scope. Outside uvicorn (the test client,
`runserver`) the middleware times and records the request itself.

The log line (logger `memoryhub.access`, INFO) holds the method, route, status, duration, the
tenant's and agent's slugs, and the client's address (a trusted proxy's client, else the
peer's: memoryhub/proxies.py): never a key, a query string, a body or memory text.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from memoryhub import metrics

SCOPE_KEY = "memoryhub.request"
access_logger = logging.getLogger("memoryhub.access")


@dataclass
class RequestInfo:
    route: str = ""
    tenant: str = ""
    agent: str = ""
    client: str = ""


def client_of(scope: dict) -> str:
    """The client's address in an ASGI scope (resolved by `memoryhub.proxies` first)."""
    client = scope.get("client")
    return client[0] if client else ""


def route_of(request: HttpRequest) -> str:
    """The request's URL pattern (`/api/v1/memories/<str:memory_id>`): a bounded label."""
    match = getattr(request, "resolver_match", None)
    if match is not None and match.route:
        return "/" + match.route
    if request.path.startswith(settings.STATIC_URL):
        return "static"
    return "unmatched"


def annotate(info: RequestInfo, request: HttpRequest) -> None:
    """Route, tenant and agent of a request Django has answered (no query: only what the
    request already holds)."""
    info.route = route_of(request)
    if not info.client:
        info.client = request.META.get("REMOTE_ADDR", "")
    user = request.__dict__.get("user")  # unevaluated lazy users stay so (no session read)
    principal_agent = getattr(getattr(user, "_wrapped", user), "agent", None)
    if principal_agent is not None:  # an API key's principal
        info.agent = principal_agent.slug
        info.tenant = user.tenant.slug  # type: ignore[union-attr]  # the principal
        return
    tenant = getattr(request, "tenant", None)  # a console view's current tenant
    if tenant is not None:
        info.tenant = tenant.slug


def record(method: str, status: int, seconds: float, info: RequestInfo) -> None:
    route = info.route or "unmatched"
    metrics.request_done(route=route, method=method, status=status, seconds=seconds)
    if settings.MEMORYHUB_ACCESS_LOG:
        access_logger.info(
            "method=%s route=%s status=%d duration_ms=%.1f tenant=%s agent=%s client=%s",
            method if method in metrics.METHODS else "other",
            route,
            status,
            seconds * 1000,
            info.tenant or "-",
            info.agent or "-",
            info.client or "-",
            # What the secret filter must scan (memories.redaction.RedactSecrets): the rest is
            # a known method, numbers and an address (the server's or a parsed IP address).
            extra={"free_text": (route, info.tenant, info.agent)},
        )


class ObserveMiddleware:
    """The outermost middleware: see the module docstring."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        scope = request.META.get("asgi.scope")
        info = scope.get(SCOPE_KEY) if scope is not None else None
        if info is not None:
            response = self.get_response(request)
            annotate(info, request)
            return response
        started = time.perf_counter()
        response = self.get_response(request)
        info = RequestInfo()
        annotate(info, request)
        record(
            request.method,  # type: ignore[arg-type]  # a request Django answered has one
            response.status_code,
            time.perf_counter() - started,
            info,
        )
        return response

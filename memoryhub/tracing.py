"""OpenTelemetry traces (docs/operations.md#tracing), off unless
OTEL_EXPORTER_OTLP_ENDPOINT is set.

`setup()` runs once per process before Django serves anything (the ASGI app, the django-q2
cluster, management commands): it installs a tracer provider exporting over OTLP/HTTP (the
standard OTEL_* variables configure it: endpoint, headers, OTEL_SERVICE_NAME, sampling) and the
official instrumentations for Django, psycopg and httpx. Our own spans — `embed`, `rank`,
`apply` — come from `span()`, which costs one attribute test while tracing is off.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace

logger = logging.getLogger("memoryhub.tracing")
_tracer: trace.Tracer | None = None


def configured() -> bool:
    return bool(
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def setup() -> bool:
    """Turn tracing on for this process when configured; returns whether it is on. Safe to
    call more than once."""
    if _tracer is not None:
        return True
    if not configured():
        return False
    provider = _otlp_provider()
    trace.set_tracer_provider(provider)
    _instrument()
    start(provider)
    return True


def start(provider: trace.TracerProvider) -> None:
    """Our own spans go to `provider` (tests give one of their own)."""
    global _tracer
    _tracer = provider.get_tracer("memoryhub")


def _otlp_provider() -> trace.TracerProvider:
    # Imported here: the SDK and exporter load only in processes that trace.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", "memoryhub")})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _instrument() -> None:
    # Imported here: the instrumentations load only in processes that trace (no cycle: third-party).
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument()
    # Statements as spans (their text, never their parameters, which hold memory text).
    PsycopgInstrumentor().instrument(enable_commenter=False, skip_dep_check=True)
    HTTPXClientInstrumentor().instrument()


def reset() -> None:
    """Tests: tracing off again (the instrumentations stay installed)."""
    global _tracer
    _tracer = None


@contextlib.contextmanager
def span(name: str, **attributes: Any) -> Iterator[None]:
    """A span of our own (`embed`, `rank`, `apply`) while tracing is on; nothing otherwise."""
    if _tracer is None:
        yield
        return
    with _tracer.start_as_current_span(name, attributes=attributes):
        yield

"""OpenTelemetry (docs/operations.md#tracing): our spans (embed, rank), and a served process
exporting the official instrumentations' spans and ours to an OTLP/HTTP receiver of our own on
127.0.0.1."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from accounts.principal import Principal
from memories.retrieval.search import memory_search
from memories.services.store import memory_store
from memoryhub import tracing
from memoryhub.throwaway import free_port
from tests.factories import make_key
from tests.support.commands import _wait_answering, command_env

BASE_DIR = Path(settings.BASE_DIR)


@pytest.fixture
def spans():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.start(provider)
    yield exporter
    tracing.reset()


@pytest.mark.django_db
def test_our_spans_name_embed_and_rank(spans, tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    memory_store(principal=principal, data={"text": "The office is in Lyon"})
    memory_search(principal=principal, data={"query": "where is the office"})
    names = [span.name for span in spans.get_finished_spans()]
    assert names.count("embed") == 2 and "rank" in names
    embed = next(s for s in spans.get_finished_spans() if s.name == "embed")
    assert embed.attributes["texts"] == 1 and embed.attributes["model"] == "hashing-v1"


def test_tracing_is_off_without_an_endpoint(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert tracing.setup() is False
    with tracing.span("embed"):
        pass  # a no-op


class Collector:
    """An OTLP/HTTP trace receiver: POST /v1/traces with protobuf bodies."""

    def __init__(self):
        self.names: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        collector.names.extend(span.name for span in scope.spans)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.mark.slow
def test_a_served_process_exports_django_psycopg_and_our_spans(transactional_db, agent):
    _, key = make_key(agent, scopes=["read", "write"])
    collector = Collector()
    port = free_port()
    env = command_env() | {
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "MEMORYHUB_EMBEDDER": "hashing",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "memoryhub.asgi:application", "--port", str(port)]  # noqa: RUF005  two rows
        + ["--log-level", "warning"],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_answering(url, server)
        headers = {"Authorization": f"Bearer {key}"}
        assert (
            httpx.post(
                url + "/api/v1/memories", json={"text": "Lyon office"}, headers=headers
            ).status_code
            == 201
        )
        assert (
            httpx.post(
                url + "/api/v1/search", json={"query": "office"}, headers=headers
            ).status_code
            == 200
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not {"embed", "rank"} <= set(collector.names):
            time.sleep(0.1)  # polling the collector (the exporter sends every 100 ms)
    finally:
        server.terminate()
        server.wait(30)
        collector.server.shutdown()
    names = set(collector.names)
    assert {"embed", "rank"} <= names, names
    assert any(n.startswith("POST ") and "memories" in n for n in names), names  # Django's
    assert any(n.split()[0] in {"INSERT", "SELECT", "UPDATE"} for n in names), names  # psycopg's

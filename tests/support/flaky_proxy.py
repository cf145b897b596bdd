"""A loopback HTTP proxy in front of a live MemoryHub that fails the first requests on purpose.

`FlakyProxy.running(upstream, plan)` serves on a free port; each request takes the next step
of `plan`, and once the plan is used up every request is passed through unchanged. Steps:

- `"forward_then_drop"`: the request reaches MemoryHub (its write happens), then the
  connection is closed without an answer: the response is lost, as on a network failure;
- `("status", code, headers, body)`: answer that without asking MemoryHub.

`proxy.seen` lists what the proxy received (method, path, Idempotency-Key), in order.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def envelope(code: str, message: str) -> bytes:
    return json.dumps(
        {"ok": False, "error": {"code": code, "message": message, "details": {}}}
    ).encode()


class FlakyProxy:
    def __init__(self, upstream: str, plan: list[Any]) -> None:
        self.upstream = upstream
        self.plan = list(plan)
        self.seen: list[tuple[str, str, str | None]] = []
        self._lock = threading.Lock()
        self._http = httpx.Client(base_url=upstream, timeout=30)

    def next_step(self) -> Any:
        with self._lock:
            return self.plan.pop(0) if self.plan else "forward"

    @classmethod
    @contextlib.contextmanager
    def running(cls, upstream: str, plan: list[Any]) -> Iterator[FlakyProxy]:
        proxy = cls(upstream, plan)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield proxy
        finally:
            server.shutdown()
            server.server_close()
            proxy._http.close()


def _handler(proxy: FlakyProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            proxy.seen.append((self.command, self.path, self.headers.get("Idempotency-Key")))
            step = proxy.next_step()
            if isinstance(step, tuple):
                _, status, headers, content = step
                self._answer(status, headers, content)
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_HEADERS}
            response = proxy._http.request(self.command, self.path, headers=headers, content=body)
            if step == "forward_then_drop":
                self.close_connection = True
                return
            relayed = {k: v for k, v in response.headers.items() if k.lower() not in HOP_HEADERS}
            relayed.pop("content-encoding", None)  # httpx has decoded the body
            self._answer(response.status_code, relayed, response.content)

        def _answer(self, status: int, headers: dict[str, str], content: bytes) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PATCH = do_DELETE = _any  # noqa: N815  http.server's method names

    return Handler

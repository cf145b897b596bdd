"""A loopback control server for test programs that run outside pytest (the TypeScript client's
`node --test` suite), so they can set up what only the test process can: agents and keys,
server settings, a flaky proxy, and a look at the database.

`HarnessControl.running(live_url, settings, monkeypatch)` serves JSON on a free port:

- `POST /key` `{"agent": slug, "tenant": slug, "scopes": [...], "subject_id": s, "policy":
  {"entry_cap": 0, ...}}` → `{"key", "tenant", "agent"}` (tenant and agent made if missing);
- `POST /settings` `{"rate_limit_per_minute": n, "embedder": name, "outage": bool,
  "webhook_allow_insecure": bool}` → the
  values they had, to set back (all restored when the test ends anyway: pytest-django's
  `settings`, pytest's `monkeypatch`);
- `POST /proxy` `{"plan": [...]}` → `{"id", "url"}`: a `FlakyProxy` in front of the live
  server (steps as there; a status step is `["status", code, headers, body text]`), and
  `GET /proxy/<id>` → `{"seen": [[method, path, idempotency key], ...]}`;
- `POST /count` `{"text": t}` → `{"count": n}`: memories with that text, every status.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import connections

from memories.embeddings import reset_embedder
from memories.models import Memory
from memoryhub import db_outage
from tests.factories import make_agent, make_key, make_tenant
from tests.support.flaky_proxy import FlakyProxy


class HarnessControl:
    def __init__(self, live_url: str, settings: Any, monkeypatch: Any) -> None:
        self.live_url = live_url
        self.settings = settings
        self.monkeypatch = monkeypatch
        self.proxies: list[FlakyProxy] = []
        self._exits = contextlib.ExitStack()
        self._lock = threading.Lock()
        self.routes: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {
            ("POST", "/key"): self.key,
            ("POST", "/settings"): self.configure,
            ("POST", "/proxy"): self.proxy,
            ("POST", "/count"): self.count,
        }

    @classmethod
    @contextlib.contextmanager
    def running(cls, live_url: str, settings: Any, monkeypatch: Any) -> Iterator[HarnessControl]:
        control = cls(live_url, settings, monkeypatch)
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(control))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        control.url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            yield control
        finally:
            server.shutdown()
            server.server_close()
            control._exits.close()
            reset_embedder()

    def key(self, body: dict[str, Any]) -> dict[str, Any]:
        tenant = make_tenant(body.get("tenant", "acme"))
        agent = make_agent(tenant, body.get("agent", "support-bot"), **body.get("policy", {}))
        _, raw = make_key(
            agent,
            scopes=body.get("scopes", ["read", "write", "admin"]),
            subject_id=body.get("subject_id"),
        )
        return {"key": raw, "tenant": tenant.slug, "agent": agent.slug}

    def configure(self, body: dict[str, Any]) -> dict[str, Any]:
        previous: dict[str, Any] = {}
        if "rate_limit_per_minute" in body:
            previous["rate_limit_per_minute"] = self.settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE
            self.settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE = int(body["rate_limit_per_minute"])
        if "embedder" in body:
            previous["embedder"] = self.settings.MEMORYHUB_EMBEDDER
            self.settings.MEMORYHUB_EMBEDDER = str(body["embedder"])
            reset_embedder()
        if "webhook_allow_insecure" in body:
            previous["webhook_allow_insecure"] = self.settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE
            self.settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = bool(body["webhook_allow_insecure"])
        if "outage" in body:
            previous["outage"] = db_outage.is_down()
            down = bool(body["outage"])
            self.monkeypatch.setattr(db_outage, "is_down", lambda: down)
        return previous

    def proxy(self, body: dict[str, Any]) -> dict[str, Any]:
        plan = [_step(step) for step in body.get("plan", [])]
        proxy = self._exits.enter_context(FlakyProxy.running(self.live_url, plan))
        with self._lock:
            self.proxies.append(proxy)
            return {"id": len(self.proxies) - 1, "url": proxy.url}

    def seen(self, index: int) -> dict[str, Any]:
        return {"seen": [list(seen) for seen in self.proxies[index].seen]}

    def count(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"count": Memory.objects.filter(text=body["text"]).count()}


def _step(step: Any) -> Any:
    if isinstance(step, list):
        kind, status, headers, content = step
        return (kind, int(status), dict(headers), str(content).encode())
    return step


def _handler(control: HarnessControl) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            prefix = "/proxy/"
            if self.path.startswith(prefix) and self.path[len(prefix) :].isdigit():
                self._run(lambda: control.seen(int(self.path[len(prefix) :])))
            else:
                self._answer(404, {"error": f"no route GET {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            route = control.routes.get(("POST", self.path))
            if route is None:
                self._answer(404, {"error": f"no route POST {self.path}"})
                return
            self._run(lambda: route(body))

        def _run(self, action: Callable[[], dict[str, Any]]) -> None:
            try:
                result = action()
            except Exception as exc:  # reported to the caller, whose test then fails
                self._answer(500, {"error": f"{type(exc).__name__}: {exc}"})
            else:
                self._answer(200, result)
            finally:
                # This request's thread opened its own database connection: close it.
                connections.close_all()

        def _answer(self, status: int, payload: dict[str, Any]) -> None:
            content = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

    return Handler

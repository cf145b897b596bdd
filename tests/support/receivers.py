"""A webhook receiver of our own on 127.0.0.1: answers each request as scripted."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes
    answered: int | None  # the status sent back; None: held until the sender gave up


@dataclass
class Receiver:
    """`script`: what the first requests get, in arrival order (a status; "hang": no answer
    until the test ends; ("hold", status): that status once the test sets `gate`); later ones
    get 200. `wait_for(n)` returns once `n` requests have come."""

    script: list = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.arrived:
                    action = receiver.script.pop(0) if receiver.script else 200
                    record = Received(dict(self.headers), body, None)
                    receiver.received.append(record)
                    receiver.arrived.notify_all()
                if action == "hang":
                    receiver.release.wait(30)  # the sender times out long before
                    return
                if isinstance(action, tuple):  # ("hold", status)
                    receiver.gate.wait(30)
                    action = action[1]
                record.answered = action
                self.send_response(action)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int, timeout: float = 30) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, timeout), (
                f"{len(self.received)} requests came, not {count}"
            )

    def stop(self) -> None:
        self.release.set()
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()

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
    """`script`: what the first requests get, in arrival order (a status, or "hang": no answer
    until the test ends); later ones get 200."""

    script: list = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> str:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    action = receiver.script.pop(0) if receiver.script else 200
                    record = Received(dict(self.headers), body, None)
                    receiver.received.append(record)
                if action == "hang":
                    receiver.release.wait(30)  # the sender times out long before
                    return
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

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

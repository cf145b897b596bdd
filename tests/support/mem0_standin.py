"""A stand-in for mem0's REST server (its server/main.py) on loopback, for the side-by-side
bench's tests (bench/versus.py): `POST /memories`, `POST /search` and `GET /memories/{id}`
as mem0 answers them, every request recorded.

- `POST /memories` stores each message's content under the body's `user_id` (what mem0 does
  with `infer: false`) and answers `{"results": [{"id", "memory", "event": "ADD"}]}`;
- `POST /search` ranks the filter's user's memories by the words they share with the query
  (most first, then the order stored) and answers `{"results": [...]}`, at most `top_k`;
- `GET /memories/{id}` answers that memory (`{"id", "memory", "user_id"}`), 404 if none;
- `fail_with` makes every request answer that status instead (a failing mem0);
- `key`: when set, a request without that `X-API-Key` is answered 401, as mem0's auth does.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class Mem0StandIn:
    def __init__(self, key: str | None = None):
        self.key = key
        self.requests: list[dict] = []  # {"path", "body", "key"}, in arrival order
        self.memories: dict[str, list[dict]] = {}  # user_id → [{"id", "memory"}]
        self.fail_with: int | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Mem0StandIn:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def of(self, path: str) -> list[dict]:
        """The recorded requests to `path`, in arrival order."""
        return [r for r in self.requests if r["path"] == path]

    def answer(self, path: str, body: dict | None, key: str | None) -> tuple[int, object]:
        with self._lock:
            self.requests.append({"path": path, "body": body, "key": key})
            if self.fail_with:
                return self.fail_with, {"detail": "stand-in told to fail"}
            if self.key and key != self.key:
                return 401, {"detail": "Authentication required."}
            if body is None:  # a GET
                if not path.startswith("/memories/"):
                    return 404, {"detail": "Not Found"}
                wanted = path.removeprefix("/memories/")
                for user, memories in self.memories.items():
                    for memory in memories:
                        if memory["id"] == wanted:
                            return 200, {**memory, "user_id": user}
                return 404, {"detail": "Memory not found"}
            if path == "/memories":
                added = []
                for message in body["messages"]:
                    memory = {"id": str(uuid.uuid4()), "memory": message["content"]}
                    self.memories.setdefault(body["user_id"], []).append(memory)
                    added.append({**memory, "event": "ADD"})
                return 200, {"results": added}
            if path == "/search":
                query = _words(body["query"])
                mine = self.memories.get(body["filters"]["user_id"], [])
                ranked = sorted(
                    enumerate(mine), key=lambda im: (-len(query & _words(im[1]["memory"])), im[0])
                )
                hits = [{**m, "score": 0.5} for _, m in ranked[: body.get("top_k") or 100]]
                return 200, {"results": hits}
            return 404, {"detail": "Not Found"}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.reply(json.loads(self.rfile.read(length) or b"{}"))

            def do_GET(self):
                self.reply(None)

            def reply(self, body: dict | None):
                status, answer = standin.answer(self.path, body, self.headers.get("X-API-Key"))
                payload = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):  # quiet
                pass

        return Handler

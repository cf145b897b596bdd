"""A stand-in model: an OpenAI-compatible chat-completions server on 127.0.0.1 that answers at
once, by rule. The demo history (`memories.demo_history`, for `manage.py screenshots`) extracts
its conversations against it, and the formation bench (the repository's `bench/`) times runs
with it, so that a run's time is all the server's (the model's own time excluded).

It is never the configured model of a real deployment. Every extraction request gets one `add`
operation citing every message of the run (the `[<seq>]` lines of the prompt's new messages),
its text made from the run's first message so that no two runs add the same memory; a summary
request (the JSON schema `thread_summary`; the bench's client asks with `json_schema` output)
gets a one-line summary. Token usage is reported as a small fixed figure.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
USAGE = (400, 60)  # prompt_tokens, completion_tokens reported per answer
_NEW_MESSAGES = "## New messages"
_MESSAGE_LINE = re.compile(r"^\[(\d+)\] [^:\n]*: ?(.*)$", re.MULTILINE)


def operations_for(prompt: str) -> dict[str, Any]:
    """The stand-in's answer to an extraction prompt: one `add` citing the run's messages."""
    tail = prompt.split(_NEW_MESSAGES, 1)[-1]
    lines = _MESSAGE_LINE.findall(tail)
    if not lines:
        return {"operations": []}
    seqs = [int(seq) for seq, _ in lines]
    first = lines[0][1].strip()[:300] or "something"
    return {
        "operations": [
            {
                "op": "add",
                "text": f"The user said: {first}",
                "key": None,
                "category": "core",
                "kind": "fact",
                "tags": ["bench"],
                "confidence": 0.9,
                "mentions": [],
                "occurred_at": None,
                "evidence": seqs,
            }
        ]
    }


class StandInLLM:
    """`with StandInLLM() as llm:` serves at `llm.url` (the `MEMORYHUB_LLM_URL` to use)."""

    def __init__(self) -> None:
        self.requests = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the stand-in model is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"  # type: ignore[str-bytes-safe]  # TCP: a str host

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.requests += 1
        prompt = "\n\n".join(str(m.get("content", "")) for m in body.get("messages", []))
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("name")
        if schema == "thread_summary":
            content = {"summary": "The user and the agent talked about several things."}
        else:
            content = operations_for(prompt)
        prompt_tokens, completion_tokens = USAGE
        return {
            "id": f"chatcmpl-standin-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "stand-in"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": json.dumps(content)},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def start(self) -> StandInLLM:
        standin = self

        class Handler(_Handler):
            llm = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="standin-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StandInLLM:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    llm: StandInLLM
    protocol_version = "HTTP/1.1"  # keep-alive, as a real model server

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path not in CHAT_PATHS:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "standin"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"message": "the body is not JSON", "type": "standin"}})
            return
        self._send(200, self.llm.answer(body))

    def _send(self, status: int, body: Any) -> None:
        payload = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

"""An OpenAI-compatible chat-completions server for the test suite, with scripted replies.

A real HTTP server on 127.0.0.1 (a free port, a daemon thread), so that tests go through the
`openai` SDK and httpx exactly as production does. It answers `POST /v1/chat/completions`
(and `/chat/completions`) with the next step of its script, first in first out:

    fake_llm.queue_json({"operations": [...]})             # the reply's content, as JSON
    fake_llm.queue_content("```json\\n{...}\\n```")         # the content, verbatim
    fake_llm.queue_error(429, headers={"Retry-After": "2"})  # an error status
    fake_llm.queue_stall(0.5)                                # answer only after 0.5 s
    fake_llm.queue_hang()                                    # never answer: a timeout
    fake_llm.queue_refusal("I can't help with that.")

and with `default_reply` once the script is empty (`{"operations": []}` unless set; a dict,
a string, or a function of the request). Every request is recorded in `requests` (path,
headers, parsed body) before its step runs, so a request the client gave up on counts too.

The `fake_llm` fixture (tests/conftest.py) starts one per test and points
`MEMORYHUB_LLM_URL` at it; `FakeLLM.running()` does the same by hand.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
DEFAULT_USAGE = (100, 20)  # prompt_tokens, completion_tokens

Reply = dict[str, Any] | str


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it (header names lower-cased)."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", [])

    @property
    def prompt(self) -> str:
        """Every message's content, joined: what the model was shown."""
        return "\n\n".join(str(m.get("content", "")) for m in self.messages)

    @property
    def response_format(self) -> dict[str, Any] | None:
        return self.body.get("response_format")


@dataclass(frozen=True)
class _Content:
    text: str | None
    usage: tuple[int, int] | None = None
    finish_reason: str = "stop"
    refusal: str | None = None


@dataclass(frozen=True)
class _Error:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Stall:
    seconds: float | None  # None: until the server stops
    then: _Content | _Error | None = None


_Step = _Content | _Error | _Stall


class FakeLLM:
    """The scripted server. Build it with `FakeLLM.running()`, or `start()` and `stop()`."""

    def __init__(self, *, default_reply: Reply | Callable[[RecordedRequest], Reply] | None = None):
        self.default_reply = default_reply if default_reply is not None else {"operations": []}
        self.default_usage = DEFAULT_USAGE
        self.requests: list[RecordedRequest] = []
        # The waits the client's retry loop asked for (the fixture routes them here).
        self.sleeps: list[float] = []
        self._script: deque[_Step] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- scripting -----------------------------------------------------------------------------

    def queue_json(
        self, reply: Any, *, usage: tuple[int, int] | None = None, finish_reason: str = "stop"
    ) -> FakeLLM:
        """Answer the next request with `reply` serialised as the message content."""
        return self._queue(_Content(json.dumps(reply), usage=usage, finish_reason=finish_reason))

    def queue_content(
        self, text: str, *, usage: tuple[int, int] | None = None, finish_reason: str = "stop"
    ) -> FakeLLM:
        """Answer the next request with `text` as the message content, verbatim."""
        return self._queue(_Content(text, usage=usage, finish_reason=finish_reason))

    def queue_refusal(self, refusal: str) -> FakeLLM:
        """Answer like a model declining under structured outputs: no content, a refusal."""
        return self._queue(_Content(None, refusal=refusal))

    def queue_error(
        self, status: int, *, body: Any = None, headers: dict[str, str] | None = None
    ) -> FakeLLM:
        """Answer the next request with status `status` (an error, or any status at all).

        `body` is OpenAI's error shape unless given; a string is sent verbatim (200 with
        `"<html>"` is a proxy's login page).
        """
        if body is None:
            body = {"error": {"message": f"fake error {status}", "type": "fake", "code": None}}
        return self._queue(_Error(status, body=body, headers=dict(headers or {})))

    def queue_stall(self, seconds: float, *, then: Reply | None = None) -> FakeLLM:
        """Keep the next request waiting `seconds`, then answer `then` (or the default reply).

        Longer than the client's timeout, it simulates one; keep it under a second all the same:
        `stop()` cuts a stall short, but a test should not wait on it.
        """
        answer = None if then is None else self._content(then)
        return self._queue(_Stall(seconds, then=answer))

    def queue_hang(self) -> FakeLLM:
        """Keep the next request waiting until the server stops: it never answers, so only the
        client's timeout ends it, however slow the machine (a stall that answers after a while
        races the timeout on a busy one)."""
        return self._queue(_Stall(None))

    @property
    def pending(self) -> int:
        """Steps of the script not used yet."""
        with self._lock:
            return len(self._script)

    @property
    def last_request(self) -> RecordedRequest:
        assert self.requests, "the fake LLM has received no request"
        return self.requests[-1]

    def _queue(self, step: _Step) -> FakeLLM:
        with self._lock:
            self._script.append(step)
        return self

    @staticmethod
    def _content(reply: Reply) -> _Content:
        return _Content(reply if isinstance(reply, str) else json.dumps(reply))

    # --- lifecycle -----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give the client (`MEMORYHUB_LLM_URL`)."""
        assert self._server is not None, "the fake LLM is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> FakeLLM:
        fake = self

        class Handler(_Handler):
            llm = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # Handler threads are never joined: a stalled one must not hold up the test's end.
        self._server.block_on_close = False
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},  # how soon stop() returns
            name="fake-llm",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes stalled handlers
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @classmethod
    @contextlib.contextmanager
    def running(cls, **kwargs: Any) -> Iterator[FakeLLM]:
        fake = cls(**kwargs).start()
        try:
            yield fake
        finally:
            fake.stop()

    # --- serving -------------------------------------------------------------------------------

    def _next_step(self, request: RecordedRequest) -> _Step:
        with self._lock:
            self.requests.append(request)
            if self._script:
                return self._script.popleft()
        return self._default_step(request)

    def _default_step(self, request: RecordedRequest) -> _Content:
        default = self.default_reply
        return self._content(default(request) if callable(default) else default)

    def _completion(self, step: _Content, request: RecordedRequest) -> dict[str, Any]:
        prompt_tokens, completion_tokens = step.usage or self.default_usage
        return {
            "id": f"chatcmpl-fake-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.body.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": step.text,
                        "refusal": step.refusal,
                    },
                    "finish_reason": step.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }


class _Handler(BaseHTTPRequestHandler):
    llm: FakeLLM

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path not in CHAT_PATHS:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "fake"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"message": "the body is not JSON", "type": "fake"}})
            return
        request = RecordedRequest(
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
        )
        step = self.llm._next_step(request)
        if isinstance(step, _Stall):
            if self.llm._stopping.wait(step.seconds):
                return
            step = step.then or self.llm._default_step(request)
        if isinstance(step, _Error):
            self._send(step.status, step.body, headers=step.headers)
        else:
            self._send(200, self.llm._completion(step, request))

    def _send(self, status: int, body: Any, *, headers: dict[str, str] | None = None) -> None:
        payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client timed out and left; that was the point

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # one stderr line per request would drown pytest's output

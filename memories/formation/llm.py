"""The model behind memory formation: an OpenAI-compatible chat-completions endpoint.

    if llm_configured():
        answer = get_llm().extract(summary=..., messages=[PromptMessage(...)], memories=[...])
        for operation in answer.operations:  # AddOp | UpdateOp | ForgetOp | ConfirmOp
            ...

`get_llm()` builds an `LLMClient` from the `MEMORYHUB_LLM_*` settings (OpenAI, vLLM, Ollama,
LM Studio, ... through the official `openai` SDK). Two calls: `extract` (the operations a
stretch of conversation calls for) and `summarize` (the thread's rolling summary). Both return
the tokens used, the time spent in the model and the prompt version, for the run to record.

Failures are three exceptions, all `LLMError`s carrying `error_class` and `detail` for the
run's error fields (and the usage and latency spent so far):

- `LLMUnavailable`: timeouts, connection errors, 429 and 5xx, still failing after
  `MAX_ATTEMPTS` tries with exponential backoff (honouring `Retry-After`): try again later.
- `LLMRequestError`: any other 4xx (bad key, unknown model, request too long), at once:
  retrying the same request cannot help.
- `LLMMalformedOutput`: the reply is not the JSON shape asked for; nothing of it may be applied.

The client sends exactly what it is given (redacting secrets happens before messages are
stored) and logs neither message content nor the API key.
"""

from __future__ import annotations

import email.utils
import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings

from memories.formation.operations import (
    OPERATIONS_SCHEMA,
    OPERATIONS_SCHEMA_NAME,
    SUMMARY_SCHEMA,
    SUMMARY_SCHEMA_NAME,
    AddOp,
    ConfirmOp,
    ForgetOp,
    Mention,
    Operation,
    OutputError,
    UpdateOp,
    parse_operations,
    parse_summary,
)
from memories.formation.prompts import (
    EXTRACT_PROMPT,
    SUMMARIZE_PROMPT,
    PromptKind,
    PromptMemory,
    PromptMessage,
    extraction_messages,
    summary_messages,
)
from memories.redaction import redact
from memoryhub import metrics
from memoryhub.tls import tls_context

if TYPE_CHECKING:
    import openai  # imported where used: see LLMClient.__init__

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_SUMMARY_CHARS",
    "OUTPUT_MODES",
    "AddOp",
    "ConfirmOp",
    "ExtractionAnswer",
    "ForgetOp",
    "LLMClient",
    "LLMError",
    "LLMMalformedOutput",
    "LLMNotConfigured",
    "LLMRequestError",
    "LLMUnavailable",
    "Mention",
    "Operation",
    "PromptKind",
    "PromptMemory",
    "PromptMessage",
    "SummaryAnswer",
    "UpdateOp",
    "Usage",
    "backoff_sleep",
    "get_llm",
    "llm_configured",
]

logger = logging.getLogger(__name__)

OUTPUT_MODES = ("json_schema", "json_object", "prompt")
MAX_ATTEMPTS = 3  # in all, the first included
BACKOFF_BASE_SECONDS = 1.0  # before the 2nd attempt; doubled before each next one, jittered
RETRY_AFTER_CAP_SECONDS = 30.0  # a server asking for longer is waited for this long at most
MAX_SUMMARY_CHARS = 4000
_DETAIL_CHARS = 300


# --- Answers --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens one model call consumed (0 when the server does not report them)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class ExtractionAnswer:
    """The operations the model proposes for a stretch of conversation, as parsed, unapplied.

    `model` is the configured model name; `latency_ms` is the time spent in model calls (all
    attempts, without the waits between them); `prompt_version` names the prompt file.
    """

    operations: list[Operation]
    usage: Usage
    latency_ms: int
    model: str
    prompt_version: str


@dataclass(frozen=True, slots=True)
class SummaryAnswer:
    """A thread's new rolling summary (at most `MAX_SUMMARY_CHARS` characters)."""

    summary: str
    usage: Usage
    latency_ms: int
    model: str
    prompt_version: str


# --- Errors ---------------------------------------------------------------------------------


class LLMError(Exception):
    """A model call that produced no usable answer.

    `error_class` and `detail` are what an extraction run records (`str(error)` is
    "<error_class>: <detail>"): the exception's name, and a short reason or the HTTP status
    with the server's error message, never anything of the request. `usage` and `latency_ms`
    are what the failed call still cost.
    """

    def __init__(
        self,
        detail: str,
        *,
        error_class: str | None = None,
        usage: Usage | None = None,
        latency_ms: int = 0,
    ) -> None:
        self.error_class = error_class or type(self).__name__
        self.detail = detail
        self.usage = usage or Usage()
        self.latency_ms = latency_ms
        super().__init__(f"{self.error_class}: {detail}")


class LLMNotConfigured(LLMError):
    """`MEMORYHUB_LLM_URL` is not set: formation is disabled (check `llm_configured()` first)."""


class LLMUnavailable(LLMError):
    """Timeouts, connection errors, 429 or 5xx on every attempt; `error_class` is the last one's."""

    def __init__(self, detail: str, *, attempts: int, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.attempts = attempts


class LLMRequestError(LLMError):
    """The server refused the request with a 4xx other than 429 (key, model, size, ...)."""

    def __init__(self, detail: str, *, status: int, **kwargs: Any) -> None:
        super().__init__(detail, **kwargs)
        self.status = status


class LLMMalformedOutput(LLMError):
    """The reply is not the JSON shape asked for; `reason` says why, briefly."""

    def __init__(self, reason: str, **kwargs: Any) -> None:
        super().__init__(reason, **kwargs)
        self.reason = reason


# --- Client ---------------------------------------------------------------------------------


def backoff_sleep(seconds: float) -> None:
    """How the retry loop waits when no `sleep` was given to the client.

    Looked up at every wait, so a test can replace it for clients built by `get_llm()` (the
    `fake_llm` fixture records the waits instead of sleeping them).
    """
    time.sleep(seconds)


@dataclass(slots=True)
class _Reply:
    content: str
    usage: Usage
    latency_ms: int


class LLMClient:
    """One configured model endpoint. Thread-safe; build it once and share it."""

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str = "not-needed",
        timeout: float = 60.0,
        output: str = "json_schema",
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if output not in OUTPUT_MODES:
            raise ValueError(f"output must be one of {', '.join(OUTPUT_MODES)} (got {output!r})")
        self.url = url
        self.model = model
        self.timeout = timeout
        self.output = output
        self._sleep = sleep
        # Imported here, not at the top: the SDK takes seconds to import, and a web process
        # that only asks `llm_configured()` should not pay for it.
        import openai

        # The SDK's own retries are off: ours count attempts, honour Retry-After within a cap,
        # and let tests skip the waits.
        self._client = openai.OpenAI(
            base_url=url,
            api_key=api_key,
            timeout=timeout,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(verify=tls_context()),
        )

    def __repr__(self) -> str:  # never the key
        return f"<LLMClient {self.model} at {self.url} ({self.output})>"

    def extract(
        self,
        *,
        summary: str,
        messages: list[PromptMessage],
        memories: list[PromptMemory],
        earlier: Sequence[PromptMessage] = (),
        kinds: Sequence[PromptKind] = (),
        user_scope: bool = False,
    ) -> ExtractionAnswer:
        """Ask the model which memories `messages` call for.

        `summary` is the thread's rolling summary ("" when there is none), `messages` the ones
        after the watermark, `memories` the agent's live memories most related to them,
        `earlier` the messages before the watermark shown as context, `kinds` the tenant's
        kinds, `user_scope` whether a user-scoped `add` is honoured. Raises `LLMUnavailable`,
        `LLMRequestError` or `LLMMalformedOutput`.
        """
        chat = extraction_messages(
            summary=summary,
            messages=messages,
            memories=memories,
            earlier=earlier,
            kinds=kinds,
            user_scope=user_scope,
            schema=self._schema_in_prompt(OPERATIONS_SCHEMA),
        )
        reply = self._complete(chat, schema_name=OPERATIONS_SCHEMA_NAME, schema=OPERATIONS_SCHEMA)
        try:
            operations = parse_operations(reply.content)
        except OutputError as exc:
            raise self._malformed(exc.reason, reply) from None
        return ExtractionAnswer(
            operations=operations,
            usage=reply.usage,
            latency_ms=reply.latency_ms,
            model=self.model,
            prompt_version=EXTRACT_PROMPT,
        )

    def summarize(self, *, summary: str, messages: list[PromptMessage]) -> SummaryAnswer:
        """Fold `messages` into the thread's rolling `summary` ("" when there is none yet).

        The new summary is cut to `MAX_SUMMARY_CHARS` if the model overran its instructions.
        Raises like `extract`.
        """
        chat = summary_messages(
            summary=summary, messages=messages, schema=self._schema_in_prompt(SUMMARY_SCHEMA)
        )
        reply = self._complete(chat, schema_name=SUMMARY_SCHEMA_NAME, schema=SUMMARY_SCHEMA)
        try:
            text = parse_summary(reply.content).strip()
        except OutputError as exc:
            raise self._malformed(exc.reason, reply) from None
        if len(text) > MAX_SUMMARY_CHARS:
            text = text[: MAX_SUMMARY_CHARS - 1].rstrip() + "…"
        return SummaryAnswer(
            summary=text,
            usage=reply.usage,
            latency_ms=reply.latency_ms,
            model=self.model,
            prompt_version=SUMMARIZE_PROMPT,
        )

    # --- one call, retried -------------------------------------------------------------------

    def _schema_in_prompt(self, schema: dict[str, Any]) -> dict[str, Any] | None:
        """The schema to spell out in the prompt: only when the server will not enforce it."""
        return None if self.output == "json_schema" else schema

    def _response_format(self, name: str, schema: dict[str, Any]) -> dict[str, Any] | None:
        if self.output == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": True},
            }
        if self.output == "json_object":
            return {"type": "json_object"}
        return None  # `prompt`: servers that take neither; the prompt asks for the JSON alone

    def _complete(
        self, chat: list[dict[str, str]], *, schema_name: str, schema: dict[str, Any]
    ) -> _Reply:
        started = time.perf_counter()
        try:
            return self._complete_retrying(chat, schema_name=schema_name, schema=schema)
        finally:
            metrics.observe(metrics.LLM_DURATION, time.perf_counter() - started)

    def _complete_retrying(
        self, chat: list[dict[str, str]], *, schema_name: str, schema: dict[str, Any]
    ) -> _Reply:
        request: dict[str, Any] = {"model": self.model, "messages": chat}
        response_format = self._response_format(schema_name, schema)
        if response_format is not None:
            request["response_format"] = response_format
        # No temperature: reasoning models (o-series, gpt-5) refuse any but the default.
        import openai

        seconds = 0.0  # in model calls, without the waits between them
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            try:
                completion = self._client.chat.completions.create(**request)
            except openai.APIError as exc:
                failure: openai.APIError | None = exc
            except ValueError as exc:
                # A 2xx whose body is not JSON (an HTML page from a proxy, say).
                seconds += time.perf_counter() - started
                raise LLMMalformedOutput(
                    f"unreadable response ({type(exc).__name__})", latency_ms=round(seconds * 1000)
                ) from None
            else:
                failure = None
            seconds += time.perf_counter() - started
            latency_ms = round(seconds * 1000)
            if failure is None:
                return self._read(completion, latency_ms=latency_ms)
            if isinstance(failure, openai.APIStatusError) and not _retryable(failure.status_code):
                raise LLMRequestError(
                    _describe(failure),
                    error_class=type(failure).__name__,
                    status=failure.status_code,
                    latency_ms=latency_ms,
                )
            if not isinstance(failure, openai.APIStatusError | openai.APIConnectionError):
                # A 2xx body the SDK could not make a completion of.
                raise LLMMalformedOutput(
                    f"unreadable response ({type(failure).__name__})", latency_ms=latency_ms
                )
            if attempt == MAX_ATTEMPTS:
                logger.warning(
                    "LLM %s unavailable after %d attempts: %s: %s",
                    self.model,
                    attempt,
                    type(failure).__name__,
                    _describe(failure),
                )
                raise LLMUnavailable(
                    _describe(failure),
                    error_class=type(failure).__name__,
                    attempts=attempt,
                    latency_ms=latency_ms,
                )
            delay = _delay(attempt, failure)
            logger.info(
                "LLM %s: %s: %s (attempt %d of %d), retrying in %.1f s",
                self.model,
                type(failure).__name__,
                _describe(failure),
                attempt,
                MAX_ATTEMPTS,
                delay,
            )
            (self._sleep or backoff_sleep)(delay)

    def _read(self, completion: Any, *, latency_ms: int) -> _Reply:
        """The text of a completion, or `LLMMalformedOutput` when there is no usable one."""
        reported = getattr(completion, "usage", None)
        usage = Usage(
            prompt_tokens=int(getattr(reported, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(reported, "completion_tokens", 0) or 0),
        )
        reply = _Reply(content="", usage=usage, latency_ms=latency_ms)
        choices = getattr(completion, "choices", None) or []
        if not choices:
            raise self._malformed("the reply has no choices", reply)
        choice = choices[0]
        message = getattr(choice, "message", None)
        if getattr(message, "refusal", None):
            raise self._malformed("the model refused to answer", reply)
        if getattr(choice, "finish_reason", None) == "length":
            raise self._malformed("the reply was cut off at the model's output limit", reply)
        reply.content = getattr(message, "content", None) or ""
        return reply

    @staticmethod
    def _malformed(reason: str, reply: _Reply) -> LLMMalformedOutput:
        return LLMMalformedOutput(reason, usage=reply.usage, latency_ms=reply.latency_ms)


def _retryable(status: int) -> bool:
    # 408 is the server's own timeout; 429 asks us to slow down; 5xx is the server's fault.
    return status in (408, 429) or status >= 500


def _delay(attempt: int, failure: openai.APIError) -> float:
    """Seconds to wait after failed attempt number `attempt` (1-based)."""
    import openai

    if isinstance(failure, openai.APIStatusError):
        asked = _retry_after(failure.response.headers)
        if asked is not None:
            return min(asked, RETRY_AFTER_CAP_SECONDS)
    # "Equal jitter": half the nominal wait for sure, the other half at random, so that
    # workers failing together do not retry together.
    nominal = BACKOFF_BASE_SECONDS * 2 ** (attempt - 1)
    return nominal / 2 + random.uniform(0, nominal / 2)


def _retry_after(headers: Any) -> float | None:
    """Retry-After in seconds: OpenAI's `retry-after-ms`, or seconds, or an HTTP date."""
    try:
        if (millis := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(millis) / 1000)
    except ValueError:
        pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def _describe(exc: openai.APIError) -> str:
    """A short account of a failed call: the status and the server's own error message, its
    secret spans redacted (a server may quote the key it refused, or a token): this is what the
    run records and the log lines show."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else body
        text = f"{exc.status_code} {message or exc.response.reason_phrase}"
    else:
        text = exc.message  # "Request timed out." / "Connection error."
    return redact(" ".join(str(text).split())[:_DETAIL_CHARS])[0]


# --- Configuration --------------------------------------------------------------------------


def llm_configured() -> bool:
    """Whether formation has a model (`MEMORYHUB_LLM_URL` is set); else its state is `disabled`."""
    return bool(getattr(settings, "MEMORYHUB_LLM_URL", ""))


def get_llm() -> LLMClient:
    """The client for the `MEMORYHUB_LLM_*` settings; `LLMNotConfigured` without a URL.

    One client (and its connection pool) per configuration, reused across calls; a test that
    overrides the settings gets a client of its own.
    """
    if not llm_configured():
        raise LLMNotConfigured("MEMORYHUB_LLM_URL is not set")
    return _client_for(
        url=settings.MEMORYHUB_LLM_URL,
        model=settings.MEMORYHUB_LLM_MODEL,
        api_key=settings.MEMORYHUB_LLM_API_KEY,
        timeout=float(settings.MEMORYHUB_LLM_TIMEOUT),
        output=settings.MEMORYHUB_LLM_OUTPUT,
    )


@functools.lru_cache(maxsize=8)
def _client_for(*, url: str, model: str, api_key: str, timeout: float, output: str) -> LLMClient:
    return LLMClient(url=url, model=model, api_key=api_key, timeout=timeout, output=output)

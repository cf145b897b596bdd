"""MCP endpoint (`/mcp`): the memory tools over streamable HTTP, built with the official SDK.

Every tool is a thin call into the same services as the REST API (same validation, same
errors, same response bodies). Authentication is the same Bearer API key, checked before the
MCP app sees the request: no valid key → 401 with the REST error body, and no tool runs; the
same per-key rate limit applies.

A tool function's signature is its JSON schema (what clients list and the SDK type-checks), but
the services receive the arguments exactly as the client sent them, as the REST views pass the
request body: explicit nulls keep their meaning (`expires_at: null` = never expires), unknown
arguments are `INVALID_INPUT` (the schemas say `additionalProperties: false`), and every other
rule and message is the REST one. An argument the SDK's type check rejects is `INVALID_INPUT`
too, naming the argument.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from types import SimpleNamespace
from typing import Annotated, Any, Literal

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field, ValidationError
from rest_framework.exceptions import Throttled

from accounts.authentication import authenticate_key, bearer_token
from accounts.principal import Principal
from memories import idempotency, selectors, validation
from memories.formation import ingest
from memories.ratelimit import KeyRateThrottle
from memories.responses import ingest_response, store_response
from memories.retrieval import hydrate, search
from memories.serialization import memory_json
from memories.services import lifecycle, store
from memoryhub.errors import (
    DomainError,
    InvalidInput,
    envelope,
    error_for_exception,
)
from memoryhub.web_pool import web_executor

MCP_PATH = "/mcp"
PRINCIPAL_SCOPE_KEY = "memoryhub.principal"

INSTRUCTIONS = """\
MemoryHub is your long-term memory. Four habits:
1. Store load-bearing facts (who the user is, standing preferences, decisions, constraints) as
   category `core`: they load first at the start of every run.
2. Reuse stable keys (`user.name`, `pref.language`, `project.deadline`): storing the same key
   again updates the memory in place instead of piling up near-duplicates.
3. Forget what is stale or wrong with `memory_forget` (give a reason); a later store of the same
   fact will tell you it was corrected before.
4. Keep entries small: one fact per memory, a sentence or two. Hydration has a byte budget.
Categories: `core` durable essentials; `daily` scratch notes for a few days (pruned 72 h after
the last write); `conversation` only for this run (needs `thread_id`, removed when the thread
ends); `workspace` facts shared with every agent of the team; `archival` long-tail detail that
is never preloaded, only found by search. Never store secrets (keys, tokens, passwords): they
are rejected.
Besides storing facts yourself, you may hand over the conversation with `memory_ingest`:
MemoryHub then forms memories from it in the background. Store explicitly what you need at
once; ingest so that the rest is not lost.
"""

# The arguments of the tool call being run, as sent (see the module docstring).
_ARGUMENTS: ContextVar[dict[str, Any]] = ContextVar("memoryhub_mcp_arguments")


def _tool_error(err: DomainError) -> ToolError:
    return ToolError(json.dumps(envelope(err.code, err.message, err.details)))


def _invalid_arguments(exc: ValidationError) -> InvalidInput:
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    return InvalidInput(f"'{field}': {first['msg']}", field=field)


class MemoryServer(MCPServer):
    """The SDK's server, with REST's input rules: unknown arguments and arguments that fail the
    schema's type check are `INVALID_INPUT` envelopes, and the tools see the raw arguments."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            try:
                validation.reject_unknown(arguments, frozenset(tool.parameters["properties"]))
            except InvalidInput as err:
                raise _tool_error(err) from None
        token = _ARGUMENTS.set(dict(arguments))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise _tool_error(_invalid_arguments(exc.__cause__)) from None
            raise
        finally:
            _ARGUMENTS.reset(token)


def _arguments() -> dict[str, Any]:
    """This call's arguments as the client sent them: what the services validate."""
    return dict(_ARGUMENTS.get())


mcp = MemoryServer(name="MemoryHub", instructions=INSTRUCTIONS, version="1.0.0")


def _principal(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = request.scope.get(PRINCIPAL_SCOPE_KEY) if request is not None else None
    if principal is None:  # the ASGI guard below makes this unreachable over HTTP
        raise ToolError(json.dumps(envelope("UNAUTHENTICATED", "Missing API key")))
    return principal


async def _call(fn, /, **kwargs) -> dict[str, Any]:
    """Run a sync service call in a worker thread (calls run in parallel, each with a database
    connection of its thread); map domain errors to tool errors."""

    def run():
        close_old_connections()
        try:
            return fn(**kwargs)
        finally:
            close_old_connections()

    try:
        return await sync_to_async(run, thread_sensitive=False, executor=web_executor())()
    except Exception as exc:  # noqa: BLE001 - every failure becomes the REST error envelope
        err = error_for_exception(exc)
        if err is None:
            raise
        assert isinstance(err, DomainError)
        raise _tool_error(err) from None


Category = Annotated[
    str | None,
    Field(
        description="core | daily | conversation | workspace | archival | a custom name "
        "[a-z0-9_-]; default: the agent's default category (core)"
    ),
]
SubjectId = Annotated[str | None, Field(description="The end user this is about (optional)")]


ThreadId = Annotated[
    str | None, Field(description="Run/conversation id (`session_id` is accepted as an alias)")
]
Timestamp = Annotated[str | None, Field(description="ISO 8601")]
KeyPrefix = Annotated[
    str | None,
    Field(description="Only memories whose key starts with this (literally), e.g. `project.`"),
]


@mcp.tool(
    description=(
        "Remember one distilled fact. Use a stable `key` for facts that change over time (storing "
        "the key again updates it in place; `expected_version` makes it compare-and-set). Pick "
        "`core` for what must always be loaded, `daily` for short-lived notes, `conversation` "
        "(with thread_id) for this run only, `workspace` to share with all agents, `archival` for "
        "detail to find later by search. Keep it to one small fact; never include secrets. "
        "Returns memory_id, message (Ok | Updated | Already remembered), near_duplicates and "
        "previously_corrected (the fact was forgotten before - check before re-adding)."
    )
)
async def memory_store(
    ctx: Context,
    text: Annotated[str | None, Field(description="The fact, in one or two sentences")] = None,
    key: Annotated[str | None, Field(description="Stable key for upserts, e.g. user.name")] = None,
    category: Category = None,
    kind: Annotated[
        str | None, Field(description="Schema name: fact, UserProfile, episode…")
    ] = None,
    data: Annotated[dict[str, Any] | None, Field(description="Optional structured fields")] = None,
    tags: list[str] | None = None,
    subject_id: SubjectId = None,
    thread_id: ThreadId = None,
    session_id: ThreadId = None,
    importance: Annotated[float | None, Field(ge=0, le=1)] = None,
    confidence: Annotated[float | None, Field(ge=0, le=1)] = None,
    capture_mode: Literal["explicit", "inferred"] | None = None,
    source_provider: str | None = None,
    mentions: list[dict[str, Any]] | None = None,
    occurred_at: Annotated[
        str | int | None,
        Field(description="When the event happened (ISO 8601 or Unix milliseconds)"),
    ] = None,
    ttl: Annotated[str | None, Field(description="Lifetime such as 30s, 15m, 24h, 7d")] = None,
    expires_at: Annotated[
        str | int | None,
        Field(description="ISO 8601 or Unix milliseconds; null: never (overrides default TTL)"),
    ] = None,
    last_confirmed_at: Timestamp = None,
    dedup_policy: Literal["ask", "skip_if_near", "insert"] | None = None,
    expected_version: Annotated[
        int | None, Field(description="Compare-and-set; 0 = create only")
    ] = None,
    expected_updated_at: Annotated[
        str | None, Field(description="Compare-and-set on updated_at; null = create only")
    ] = None,
) -> dict[str, Any]:
    principal, args = _principal(ctx), _arguments()

    def run():
        # The REST store's path; a tool call has no Idempotency-Key to give.
        return idempotency.respond(
            principal=principal,
            operation="store",
            payload=args,
            key=None,
            prepare=lambda: store.memory_store_prepare(principal=principal, data=args),
            action=lambda prepared: store_response(
                store.memory_store_write(prepared=prepared), agent=principal.agent
            ),
        ).body

    return await _call(run)


@mcp.tool(
    description=(
        "Recall the memory stored under a stable key (null when there is none). Cheap: use it "
        "before re-storing a keyed fact, or to read one known fact."
    )
)
async def memory_recall(ctx: Context, key: str, subject_id: SubjectId = None) -> dict[str, Any]:
    principal = _principal(ctx)

    def run():
        memory = selectors.memory_recall(principal=principal, key=key, subject_id=subject_id)
        return {
            "ok": True,
            "memory": memory_json(memory, agent=principal.agent) if memory else None,
        }

    return await _call(run)


@mcp.tool(
    description=(
        "List memories newest first, with filters; page with `cursor` (next_cursor of the previous "
        "page). Use memory_search to find memories by meaning instead."
    )
)
async def memory_list(
    ctx: Context,
    category: str | None = None,
    kind: str | None = None,
    tags: Annotated[list[str] | None, Field(description="All of these tags")] = None,
    subject_id: SubjectId = None,
    thread_id: str | None = None,
    key_prefix: KeyPrefix = None,
    updated_after: Timestamp = None,
    include_shared: bool | None = None,
    limit: Annotated[int | None, Field(ge=1, le=200)] = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    principal, filters = _principal(ctx), _arguments()

    def run():
        memories, next_cursor = selectors.memory_list(principal=principal, filters=filters)
        return {
            "ok": True,
            "memories": [memory_json(m, agent=principal.agent) for m in memories],
            "next_cursor": next_cursor,
        }

    return await _call(run)


@mcp.tool(
    description=(
        "Forget a memory that is stale or wrong (by memory_id or key). It is tombstoned with your "
        "reason, so storing the same fact later reports previously_corrected. `purge` erases it "
        "irreversibly (admin keys only; the right-to-erasure path)."
    )
)
async def memory_forget(
    ctx: Context,
    memory_id: str | None = None,
    key: str | None = None,
    subject_id: SubjectId = None,
    reason: str | None = None,
    purge: bool = False,
) -> dict[str, Any]:
    principal = _principal(ctx)
    if not memory_id and not key:
        raise _tool_error(InvalidInput("Give memory_id or key", field="memory_id"))

    def run():
        deleted, mid = lifecycle.memory_forget(
            principal=principal,
            memory_id=memory_id,
            key=key,
            subject_id=subject_id,
            reason=reason or "",
            purge=purge,
        )
        return {"ok": True, "deleted": deleted, "memory_id": mid}

    return await _call(run)


@mcp.tool(
    description=(
        "Search memories by meaning and words (hybrid full-text + vector by default). Use it when "
        "you need facts you did not preload, including `archival` ones. Results carry relevance, "
        "confidence, when, and whether the memory is the latest version of its key."
    )
)
async def memory_search(
    ctx: Context,
    query: str,
    mode: Literal["hybrid", "semantic", "keyword"] | None = None,
    limit: Annotated[int | None, Field(ge=1, le=100)] = None,
    min_score: Annotated[float | None, Field(ge=0, le=1)] = None,
    category: Annotated[str | None, Field(description="Only this category")] = None,
    categories: Annotated[list[str] | None, Field(description="Only these categories")] = None,
    kind: str | None = None,
    tags: Annotated[list[str] | None, Field(description="All of these tags")] = None,
    subject_id: SubjectId = None,
    thread_id: ThreadId = None,
    session_id: ThreadId = None,
    include_shared: bool | None = None,
    include_history: Annotated[
        bool | None, Field(description="Also older texts of re-stored keys (isLatest false)")
    ] = None,
    key_prefix: KeyPrefix = None,
) -> dict[str, Any]:
    principal, args = _principal(ctx), _arguments()
    return await _call(search.memory_search, principal=principal, data=args)


@mcp.tool(
    description=(
        "Load your memory at the start of a run: core facts first, then the most recent notes, "
        "within a byte budget. Pass subject_id for the user you serve and thread_id for this run; "
        "with a query and archival_mode=auto, matching archival memories are added too. "
        "format=markdown returns a compact block to put in your context."
    )
)
async def memory_hydrate(
    ctx: Context,
    subject_id: SubjectId = None,
    thread_id: ThreadId = None,
    session_id: ThreadId = None,
    budget_bytes: Annotated[int | None, Field(ge=0)] = None,
    query: str | None = None,
    archival_mode: Literal["tool_only", "auto", "off"] | None = None,
    archival_limit: Annotated[int | None, Field(ge=0)] = None,
    archival_min_score: Annotated[float | None, Field(ge=0, le=1)] = None,
    include_agent_core: bool | None = None,
    include_user_core: bool | None = None,
    format: Literal["json", "markdown"] | None = None,
    explain: bool | None = None,
) -> dict[str, Any]:
    principal, args = _principal(ctx), _arguments()
    return await _call(hydrate.memory_hydrate, principal=principal, data=args)


@mcp.tool(
    description=(
        "Hand MemoryHub the conversation itself; it forms memories from it in the background "
        "(no wait on your turn) and keeps what lasts: facts about the user, preferences, "
        "decisions, corrections of what it knew. Send the turns as they happen, or the whole "
        "conversation again at the end: messages it already holds (same role, content and "
        "created_at) are skipped, so give each message its created_at to resend safely. "
        "Use memory_store instead for a fact you must be able to rely on at once or under a "
        "stable key; use memory_ingest so that nothing worth remembering is lost. Secrets in "
        "messages are redacted before anything is stored. `extract`: auto (default: once the "
        "thread is idle), now, or off (store only). Returns accepted, duplicates, redacted and "
        "the extraction state (scheduled, queued, off, or disabled when no model is set up)."
    )
)
async def memory_ingest(
    ctx: Context,
    thread_id: Annotated[str, Field(description="This conversation's id (yours, opaque)")],
    messages: Annotated[
        list[dict[str, Any]],
        Field(
            description="1-100 messages, oldest first: {role: user | assistant | system | tool, "
            "content: text up to 32,000 characters, name?: speaker, created_at?: ISO 8601}"
        ),
    ],
    subject_id: SubjectId = None,
    extract: Literal["auto", "now", "off"] | None = None,
) -> dict[str, Any]:
    principal, args = _principal(ctx), _arguments()
    data = {name: value for name, value in args.items() if name != "thread_id"}

    def run():
        return idempotency.respond(
            principal=principal,
            operation="thread_messages",
            payload=args,
            key=None,
            action=lambda _: ingest_response(
                ingest.thread_messages_add(principal=principal, thread_id=thread_id, data=data)
            ),
        ).body

    return await _call(run)


# Unknown arguments are refused (INVALID_INPUT): say so in every tool's schema.
for _tool in mcp._tool_manager.list_tools():
    _tool.parameters["additionalProperties"] = False


def _transport_security() -> TransportSecuritySettings:
    # Host and Origin are checked before a request reaches the SDK (`memoryhub.asgi`), with
    # Django's ALLOWED_HOSTS rules (`.example.com` included) and answers in our envelope.
    return TransportSecuritySettings(enable_dns_rebinding_protection=False)


def _build_app():
    # Stateless + JSON responses: any web worker can answer any request (no session affinity).
    return mcp.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=_transport_security(),
    )


_current = {"app": None}


def _mcp_app():
    if _current["app"] is None:
        _current["app"] = _build_app()
    return _current["app"]


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _authenticate(raw: str | None) -> Principal:
    """The key's principal, under the same per-key rate limit as REST (one request = one HTTP
    request to /mcp, as one REST call is)."""
    close_old_connections()
    try:
        principal = authenticate_key(raw)
    finally:
        close_old_connections()
    throttle = KeyRateThrottle()
    if not throttle.allow_request(SimpleNamespace(user=principal), None):
        raise Throttled(throttle.wait())
    return principal


async def mcp_application(scope, receive, send):
    """The SDK's app behind the same Bearer-key check as the REST API."""
    if scope["type"] == "lifespan":
        # The SDK's session manager runs once per instance: each server start gets a fresh app.
        _current["app"] = _build_app()
        await _current["app"](scope, receive, send)
        return
    if scope["type"] != "http":
        await _mcp_app()(scope, receive, send)
        return
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    try:
        principal = await sync_to_async(
            _authenticate, thread_sensitive=False, executor=web_executor()
        )(bearer_token(headers.get("authorization")))
    except DomainError as err:
        await _send_json(
            send,
            err.status,
            envelope(err.code, err.message, err.details),
            [(b"www-authenticate", b'Bearer realm="memoryhub"')],
        )
        return
    except Exception as exc:  # noqa: BLE001 - database down etc.: the same envelope as REST
        err = error_for_exception(exc)
        if err is None:
            raise
        await _send_json(
            send,
            err.status,
            envelope(err.code, err.message, err.details),
            [(k.lower().encode(), v.encode()) for k, v in err.headers.items()],
        )
        return
    scope = dict(scope)
    scope[PRINCIPAL_SCOPE_KEY] = principal
    await _mcp_app()(scope, receive, send)

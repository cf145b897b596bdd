"""The memory tools (docs/api.md#mcp), each a thin call into the services REST calls."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from memories import idempotency, selectors
from memories.formation import ingest
from memories.mcp import kind_tools
from memories.mcp.calls import arguments, call, principal_of, tool_error
from memories.mcp.server import mcp
from memories.responses import ingest_response
from memories.retrieval import hydrate, search
from memories.serialization import iso, memory_json
from memories.services import changes, lifecycle
from memoryhub.errors import InvalidInput, NotFound

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
    name="memory_store",
    description=(
        "Remember one distilled fact. Use a stable `key` for facts that change over time (storing "
        "the key again updates it in place; `expected_version` makes it compare-and-set). Pick "
        "`core` for what must always be loaded, `daily` for short-lived notes, `conversation` "
        "(with thread_id) for this run only, `workspace` to share with all agents, `archival` for "
        "detail to find later by search. Keep it to one small fact; never include secrets. "
        "Returns memory_id, action (created | updated | replaced | skipped), message, "
        "near_duplicates and previously_corrected (the fact was forgotten before - check "
        "before re-adding)."
    ),
)
async def tool_memory_store(
    ctx: Context,
    text: Annotated[str | None, Field(description="The fact, in one or two sentences")] = None,
    key: Annotated[str | None, Field(description="Stable key for upserts, e.g. user.name")] = None,
    category: Category = None,
    kind: Annotated[
        str | None,
        Field(
            description="A kind of the tenant (fact, UserProfile, AgentInstructions, "
            "InteractionLog, …) or a free label; a kind with a schema checks `data`, a single "
            "kind keeps one record per owner and subject (a store replaces it)"
        ),
    ] = None,
    scope: Annotated[
        Literal["agent", "user"] | None,
        Field(
            description="user: a fact about the person that holds for every agent serving "
            "them (needs subject_id); agent (default): yours"
        ),
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
    principal, args = principal_of(ctx), arguments()
    return await call(kind_tools.stored, principal=principal, body=args)


@mcp.tool(
    name="memory_recall",
    description=(
        "Recall the memory stored under a stable key (null when there is none). Cheap: use it "
        "before re-storing a keyed fact, or to read one known fact."
    ),
)
async def tool_memory_recall(
    ctx: Context, key: str, subject_id: SubjectId = None
) -> dict[str, Any]:
    principal = principal_of(ctx)

    def run():
        memory = selectors.memory_recall(principal=principal, key=key, subject_id=subject_id)
        return {
            "ok": True,
            "memory": memory_json(memory, agent=principal.agent) if memory else None,
        }

    return await call(run)


@mcp.tool(
    name="memory_list",
    description=(
        "List memories newest first, with filters; page with `cursor` (next_cursor of the previous "
        "page). Use memory_search to find memories by meaning instead."
    ),
)
async def tool_memory_list(
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
    principal, filters = principal_of(ctx), arguments()

    def run():
        memories, next_cursor, as_of = selectors.memory_list(principal=principal, filters=filters)
        return {
            "ok": True,
            "memories": [memory_json(m, agent=principal.agent) for m in memories],
            "next_cursor": next_cursor,
            "as_of": iso(as_of),
        }

    return await call(run)


@mcp.tool(
    name="memory_forget",
    description=(
        "Forget a memory that is stale or wrong (by memory_id or key). It is tombstoned with your "
        "reason, so storing the same fact later reports previously_corrected. `purge` erases it "
        "irreversibly (admin keys only; the right-to-erasure path)."
    ),
)
async def tool_memory_forget(
    ctx: Context,
    memory_id: str | None = None,
    key: str | None = None,
    subject_id: SubjectId = None,
    reason: str | None = None,
    purge: bool = False,
) -> dict[str, Any]:
    principal = principal_of(ctx)
    if not memory_id and not key:
        raise tool_error(InvalidInput("Give memory_id or key", field="memory_id"))

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

    return await call(run)


@mcp.tool(
    name="memory_update",
    description=(
        "Change a memory in place (by memory_id, or by key): only the fields you pass. Give "
        "`expected_version` (the version you read) to make it compare-and-set: if the memory "
        "changed since, nothing is written and the error is CONFLICT with "
        "`details.current_version` (read it again, then decide). `expires_at: null` removes "
        "its own expiry (retention policies still apply). Returns the memory as it now is."
    ),
)
async def tool_memory_update(
    ctx: Context,
    memory_id: str | None = None,
    key: Annotated[str | None, Field(description="The memory under this key")] = None,
    subject_id: SubjectId = None,
    text: str | None = None,
    data: Annotated[dict[str, Any] | None, Field(description="Replaces the data")] = None,
    tags: list[str] | None = None,
    category: Category = None,
    expires_at: Annotated[
        str | int | None,
        Field(description="ISO 8601 or Unix milliseconds; null removes its own expiry"),
    ] = None,
    ttl: Annotated[str | None, Field(description="Lifetime from now: 30s, 15m, 24h, 7d")] = None,
    expected_version: Annotated[
        int | None, Field(description="Compare-and-set: the version you read")
    ] = None,
    expected_updated_at: Annotated[
        str | None, Field(description="Compare-and-set on updated_at")
    ] = None,
) -> dict[str, Any]:
    principal, args = principal_of(ctx), arguments()
    if not memory_id and not key:
        raise tool_error(InvalidInput("Give memory_id or key", field="memory_id"))
    fields = {k: v for k, v in args.items() if k not in ("memory_id", "key", "subject_id")}

    def run():
        target = memory_id
        if not target:
            found = selectors.memory_recall(principal=principal, key=key, subject_id=subject_id)
            if found is None:
                raise NotFound()
            target = found.pk
        memory = changes.memory_update(
            principal=principal, memory_id=target, data=fields, subject_id=subject_id
        )
        return {"ok": True, "memory": memory_json(memory, agent=principal.agent)}

    return await call(run)


@mcp.tool(
    name="memory_keys",
    description=(
        "List the keys of the memories you can see (sorted), to find a keyed fact before "
        "recalling or updating it. `prefix` keeps the keys that start with it (a namespace "
        "such as `user.`), `category` those of one category."
    ),
)
async def tool_memory_keys(
    ctx: Context,
    prefix: KeyPrefix = None,
    category: Annotated[str | None, Field(description="Only this category")] = None,
    subject_id: SubjectId = None,
) -> dict[str, Any]:
    principal = principal_of(ctx)

    def run():
        keys = selectors.memory_keys(
            principal=principal, subject_id=subject_id, category=category, key_prefix=prefix
        )
        return {"ok": True, "keys": keys}

    return await call(run)


@mcp.tool(
    name="memory_search",
    description=(
        "Search memories by meaning and words (hybrid full-text + vector by default). Use it when "
        "you need facts you did not preload, including `archival` ones. Results carry relevance, "
        "confidence, when, and whether the memory is the latest version of its key."
    ),
)
async def tool_memory_search(
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
    principal, args = principal_of(ctx), arguments()
    return await call(search.memory_search, principal=principal, data=args)


@mcp.tool(
    name="memory_hydrate",
    description=(
        "Load your memory at the start of a run: the user's core facts and yours first (each "
        "block bounded), then the most recent notes, within a byte budget. Pass subject_id for "
        "the user you serve and thread_id for this run; with a query and archival_mode=auto, "
        "matching archival memories come in their own list `archival` (outside the budget). "
        "format=markdown returns a compact block to put in your context."
    ),
)
async def tool_memory_hydrate(
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
    principal, args = principal_of(ctx), arguments()
    return await call(hydrate.memory_hydrate, principal=principal, data=args)


@mcp.tool(
    name="memory_ingest",
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
    ),
)
async def tool_memory_ingest(
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
    principal, args = principal_of(ctx), arguments()
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

    return await call(run)


# Unknown arguments are refused (INVALID_INPUT): say so in every tool's schema. The schemas'
# titles name the tool, not its Python function (`tool_<name>`, which the SDK would use).
for _tool in mcp._tool_manager.list_tools():
    _tool.parameters["additionalProperties"] = False
    _tool.parameters["title"] = f"{_tool.name}Arguments"
    if _tool.output_schema is not None:
        _tool.output_schema["title"] = f"{_tool.name}DictOutput"

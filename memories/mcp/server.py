"""The MCP server (docs/api.md#mcp): the official SDK's server with REST's input rules, and the
tools that depend on the caller's tenant.

Every tool is a thin call into the same services as the REST API (same validation, same
errors, same response bodies). A tool function's signature is its JSON schema (what clients
list and the SDK type-checks), but the services receive the arguments exactly as the client
sent them, as the REST views pass the request body: explicit nulls keep their meaning
(`expires_at: null` = never expires), unknown arguments are `INVALID_INPUT` (the schemas say
`additionalProperties: false`), and every other rule and message is the REST one. An argument
the SDK's type check rejects is `INVALID_INPUT` too, naming the argument.

Besides the memory tools (`memories.mcp.tools`), an agent lists one `create_<kind>` tool per
kind with a schema of its tenant (`memories.mcp.kind_tools`); when the tenant's registry changes,
its listen streams get `notifications/tools/list_changed` (`memories.mcp.listen`).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ListToolsResult
from pydantic import ValidationError

from memories import validation
from memories.mcp import calls, kind_tools
from memories.mcp.listen import bus, tenant_middleware
from memoryhub.errors import InvalidInput

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
Facts about the person you serve that hold for every agent (an allergy, their name) take
`scope: user` with their `subject_id`: every agent acting for them sees it. Kinds with a schema
(e.g. `UserProfile`) have their own `create_<kind>` tool; a single kind (one profile per user)
is replaced by each store. Fix a memory in place with `memory_update` (give `expected_version`),
and list what you have with `memory_keys`.
Besides storing facts yourself, you may hand over the conversation with `memory_ingest`:
MemoryHub then forms memories from it in the background. Store explicitly what you need at
once; ingest so that the rest is not lost.
"""


class MemoryServer(MCPServer):
    """The SDK's server, with REST's input rules: unknown arguments and arguments that fail the
    schema's type check are `INVALID_INPUT` envelopes, and the tools see the raw arguments.
    The caller's tenant adds its kind tools to the list, and answers their calls."""

    async def _handle_list_tools(self, ctx, params) -> ListToolsResult:
        tools = await self.list_tools()
        principal = calls.request_principal(ctx.request)
        if principal is not None:
            tools += await calls.call(kind_tools.tools_for, tenant=principal.tenant)
        return ListToolsResult(tools=tools)

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is None:
            request = context.request_context.request if context is not None else None
            principal = calls.request_principal(request)
            if principal is not None and name.startswith("create_"):
                result = await calls.call(
                    kind_tools.store_kind, principal=principal, name=name, arguments=arguments
                )
                if result is not None:
                    return result
        else:
            try:
                validation.reject_unknown(arguments, frozenset(tool.parameters["properties"]))
            except InvalidInput as err:
                raise calls.tool_error(err) from None
        token = calls.ARGUMENTS.set(dict(arguments))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise calls.tool_error(calls.invalid_arguments(exc.__cause__)) from None
            raise
        finally:
            calls.ARGUMENTS.reset(token)


mcp = MemoryServer(
    name="MemoryHub",
    instructions=INSTRUCTIONS,
    version="1.0.0",
    subscriptions=bus,
    middleware=[tenant_middleware],
)

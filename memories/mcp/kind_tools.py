"""One MCP tool per registered kind with a schema: `create_<snake_case name>`
(`create_user_profile`), listed to the agents of that tenant only. Its input schema is the
kind's schema (its properties are the memory's `data`) plus `subject_id`, `scope` and `tags`;
a call is the REST store of that kind, through the same services and validation."""

from __future__ import annotations

import json
from typing import Any

from mcp_types import CallToolResult, TextContent
from mcp_types import Tool as MCPTool

from accounts.models import Tenant
from accounts.principal import Principal
from memories import idempotency, kind_registry, validation
from memories.models import Kind
from memories.responses import store_response
from memories.services import store
from memoryhub.errors import InvalidInput

# The arguments a kind tool takes besides the kind's own fields (those become `data`).
RESERVED: dict[str, dict[str, Any]] = {
    "subject_id": {
        "type": ["string", "null"],
        "description": "The end user this is about (required for scope user)",
    },
    "scope": {
        "type": ["string", "null"],
        "enum": ["agent", "user", None],
        "description": "user: the subject's memory across every agent; agent (default): yours",
    },
    "tags": {"type": ["array", "null"], "items": {"type": "string"}},
}


def input_schema(kind: Kind) -> dict[str, Any]:
    """The kind's schema with the reserved arguments added (they win over a property of the
    same name, which such a kind cannot be given through its tool)."""
    schema = kind.schema or {}
    properties = {
        name: value
        for name, value in (schema.get("properties") or {}).items()
        if name not in RESERVED
    }
    out: dict[str, Any] = {"type": "object", "properties": {**properties, **RESERVED}}
    required = [name for name in schema.get("required") or [] if name not in RESERVED]
    if required:
        out["required"] = required
    out["additionalProperties"] = schema.get("additionalProperties", True)
    for keyword in ("$defs", "definitions"):
        if keyword in schema:
            out[keyword] = schema[keyword]
    return out


def _description(kind: Kind) -> str:
    what = kind.description or f"A {kind.name} memory."
    if kind.single:
        how = (
            "One record per owner and subject: storing it again replaces the record's data "
            "(action `replaced`), its history kept."
        )
    else:
        how = "Each call adds one record."
    return (
        f"Store a {kind.name} ({kind.memory_type}): {what} {how} Pass its fields as arguments "
        "(checked against its schema); `scope: user` with a `subject_id` makes it the user's "
        "across every agent."
    )


def tools_for(tenant: Tenant) -> list[MCPTool]:
    """The tenant's kind tools, by name."""
    return [
        MCPTool(
            name=kind_registry.tool_name(kind.name),
            description=_description(kind),
            input_schema=input_schema(kind),
        )
        for kind in kind_registry.registry(tenant).kinds
        if kind.schema is not None
    ]


def kind_of_tool(tenant: Tenant, name: str) -> Kind | None:
    for kind in kind_registry.registry(tenant).kinds:
        if kind.schema is not None and kind_registry.tool_name(kind.name) == name:
            return kind
    return None


def store_kind(
    *, principal: Principal, name: str, arguments: dict[str, Any]
) -> CallToolResult | None:
    """Run the kind tool `name` (None: the tenant has no such tool): the REST store's path, with
    the kind's fields as `data`."""
    kind = kind_of_tool(principal.tenant, name)
    if kind is None:
        return None
    validation.require_object(arguments)
    schema = input_schema(kind)
    if schema["additionalProperties"] is False:
        validation.reject_unknown(arguments, frozenset(schema["properties"]))
    tags = arguments.get("tags")
    if tags is not None and not isinstance(tags, list):
        raise InvalidInput("'tags' must be a list of strings", field="tags")
    body = {
        "kind": kind.name,
        "data": {k: v for k, v in arguments.items() if k not in RESERVED},
        **{k: arguments[k] for k in RESERVED if arguments.get(k) is not None},
    }
    answer = stored(principal=principal, body=body)
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(answer))], structured_content=answer
    )


def stored(*, principal: Principal, body: dict[str, Any]) -> dict[str, Any]:
    """A store through MCP (`memory_store`, a kind's tool): the REST store's path, its body.
    A tool call has no Idempotency-Key to give."""
    return idempotency.respond(
        principal=principal,
        operation="store",
        payload=body,
        key=None,
        prepare=lambda: store.memory_store_prepare(principal=principal, data=body),
        action=lambda prepared: store_response(
            store.memory_store_write(prepared=prepared), agent=principal.agent
        ),
    ).body

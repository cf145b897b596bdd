"""The MCP server (SPEC §5, §13.1, §13.6): `server` (the SDK's server with REST's input rules,
the per-tenant kind tools and their `tools/list_changed`), `tools` (the memory tools), `kind_tools`
(one `create_<kind>` tool per kind with a schema), `listen` (change notifications across
processes), `calls` (what every tool shares: the caller, its raw arguments, the service call).
`memories.mcp_server` serves it over HTTP."""

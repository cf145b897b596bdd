"""An MCP session with the official `mcp` client against a real server, and a tool result's
JSON body."""

from __future__ import annotations

import asyncio
import json
import random
import string

from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# Built at run time so no token-shaped literal sits in the repository.
GITHUB_TOKEN = "ghp_" + "".join(
    random.Random(7).choices(string.ascii_letters + string.digits, k=36)
)


async def _session_calls(url: str, key: str, calls: list[tuple[str, dict]]):
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        streamable_http_client(f"{url}/mcp", http_client=http_client) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        tools = await session.list_tools()
        results = []
        for name, args in calls:
            results.append(await session.call_tool(name, args))
        return {t.name for t in tools.tools}, results


def run_session(url, key, calls):
    return asyncio.run(_session_calls(url, key, calls))


def body(result) -> dict:
    """A tool result's JSON body (structured content, or the error envelope in the text)."""
    if result.is_error:
        # The SDK prefixes "Error executing tool <name>: " to the envelope.
        text = result.content[0].text
        return json.loads(text[text.index("{") :])
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def listen_for_list_changes(url: str, key: str, steps, headers=None) -> list:
    """Open an MCP listen stream (`tools/list_changed`) at `url`; for each step run it (in a
    thread) and take the next event (20 s at most). The events, then the tool names listed at
    the end. `headers`: sent with every request besides the key."""
    headers = {"Authorization": f"Bearer {key}", **(headers or {})}
    events = []
    async with (
        create_mcp_http_client(headers=headers) as http_client,
        Client(streamable_http_client(f"{url}/mcp", http_client=http_client)) as client,
    ):
        async with client.listen(tools_list_changed=True) as subscription:
            for step in steps:
                await asyncio.to_thread(step)
                events.append(await asyncio.wait_for(subscription.__anext__(), 20))
        tools = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
    return [*events, tools]

"""The Python client's recipes (clients/python/README.md), executed as written against a live
MemoryHub: an OpenAI Agents SDK agent with MemoryHub as its MCP server, a LangGraph graph
compiled with `MemoryHubStore`, LangMem's memory tools on the store, and the change feed. No
model is called (none is needed up to that point)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memories.models import Memory

ROOT = Path(__file__).resolve().parents[2]
# Where recipes are written: the client's own page (and the README, should one move there).
PAGES = (ROOT / "clients" / "python" / "README.md", ROOT / "README.md")


def recipe(name: str) -> str:
    pattern = rf"<!-- recipe: {re.escape(name)} -->\n```python\n(.*?)\n```"
    found = [m.group(1) for page in PAGES if (m := re.search(pattern, page.read_text(), re.S))]
    assert len(found) == 1, f"recipe {name!r} is written {len(found)} times, not once"
    return found[0]


@pytest.fixture
def run_recipe(live, monkeypatch, capsys):
    monkeypatch.setenv("MEMORYHUB_URL", live.url)
    monkeypatch.setenv("MEMORYHUB_API_KEY", live.key)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def run(name: str) -> str:
        exec(compile(recipe(name), f"recipe:{name}", "exec"), {"__name__": "__recipe__"})
        return capsys.readouterr().out

    return run


def test_agents_sdk_agent_with_memoryhub_as_mcp_server(run_recipe):
    out = run_recipe("agents-sdk")
    assert "'memory_hydrate'" in out and "'memory_store'" in out and "'memory_search'" in out
    assert "search: Prefers metric units." in out
    assert Memory.objects.get(key="pref.units").text == "Prefers metric units."


def test_langgraph_graph_compiled_with_the_store(run_recipe):
    out = run_recipe("langgraph")
    assert "'recalled': ['Alice is allergic to peanuts']" in out
    memory = Memory.objects.get(key__startswith="langgraph/users/alice/facts/")
    assert memory.data == {"value": {"text": "Alice is allergic to peanuts"}}


def test_langmem_tools_on_the_store(run_recipe):
    out = run_recipe("langmem")
    memory = Memory.objects.get(key__startswith="langgraph/memories/alice/")
    assert memory.text == "Alice prefers dark mode"
    created, found = out.splitlines()
    assert created.lower().startswith("created memory ")
    hits = json.loads(found)
    assert hits[0]["namespace"] == ["memories", "alice"]
    assert "Alice prefers dark mode" in json.dumps(hits[0]["value"])


def test_a_cache_follows_the_change_feed(run_recipe):
    out = run_recipe("change-feed")
    assert out.splitlines() == [
        "memory.created 1 Ships on Fridays",
        "memory.updated 2 Ships on Thursdays",
        "memory.forgotten True",
    ]

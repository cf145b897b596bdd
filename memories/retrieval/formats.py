"""The output formats of retrieval: one search hit and hydrate's markdown block."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from accounts.models import Agent
from memories.models import Memory
from memories.serialization import iso
from memories.visibility import source_label


def search_hit_json(
    memory: Memory,
    *,
    agent: Agent,
    relevance: float,
    is_latest: bool = True,
    slugs: dict[int, str] | None = None,
) -> dict[str, Any]:
    """One hit of `POST /api/v1/search` (the LLM-facing format)."""
    payload = {"text": memory.text}
    if isinstance(memory.data, dict):
        payload.update({k: v for k, v in memory.data.items() if k != "text"})
    return {
        "id": memory.id,
        "key": memory.key,
        "kind": memory.kind,
        "category": memory.category,
        "quality": {
            "relevance": round(min(max(relevance, 0.0), 1.0), 6),
            "confidence": memory.confidence,
        },
        "data": payload,
        "context": {
            "when": iso(memory.occurred_at or memory.updated_at),
            "created_at": iso(memory.created_at),
            "updated_at": iso(memory.updated_at),
            "expires_at": iso(memory.expires_at),
            "mentions": list(memory.mentions or []),
            "tags": list(memory.tags or []),
            "isLatest": is_latest,
            "lastConfirmedAt": iso(memory.last_confirmed_at),
        },
        "source": source_label(memory, agent, slugs),
    }


def hydrate_markdown(
    entries: list[dict[str, Any]],
    bytes_used: int,
    budget: int,
    *,
    archival: Sequence[dict[str, Any]] = (),
) -> str:
    """Hydrate's `format: markdown` block: one line per entry, under a heading per category,
    in the order the entries were chosen; the archival matches last, under their own heading
    ("Possibly relevant"), best first."""
    lines = [f"## Memory context ({len(entries)} entries, {bytes_used}/{budget} bytes)"]
    current = None
    for memory in entries:
        heading = memory["category"]
        if heading != current:
            lines.append(f"\n### {heading}")
            current = heading
        lines.append(_markdown_line(memory))
    if archival:
        lines.append("\n### Possibly relevant")
        lines.extend(_markdown_line(memory) for memory in archival)
    return "\n".join(lines) + "\n"


def _markdown_line(memory: dict[str, Any]) -> str:
    """One memory as a line of hydrate's markdown block."""
    label = f"**{memory['key']}**: " if memory["key"] else ""
    text = " ".join(memory["text"].split()) if memory["text"] else ""
    if memory["data"]:
        data = json.dumps(memory["data"], ensure_ascii=False, separators=(",", ":"))
        text = f"{text} {data}".strip()
    stamp = memory["updated_at"][:10]
    tags = f" #{' #'.join(memory['tags'])}" if memory["tags"] else ""
    return f"- {label}{text} ({stamp}){tags}"

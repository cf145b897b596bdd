"""A memory as the agent API shows it: the SPEC §4 `memory` object (never the embedding)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from accounts.models import Agent
from memories.models import Memory
from memories.visibility import source_label

# The exact field list of SPEC §4, in this order.
MEMORY_FIELDS = (
    "id",
    "key",
    "category",
    "kind",
    "text",
    "data",
    "tags",
    "subject_id",
    "thread_id",
    "importance",
    "confidence",
    "capture_mode",
    "source_provider",
    "mentions",
    "expires_at",
    "last_confirmed_at",
    "created_at",
    "updated_at",
    "version",
    "status",
    "review_state",
    "size_bytes",
    "agent",
    "source",
)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, always with microseconds (so it round-trips exactly)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def memory_json(
    memory: Memory, *, agent: Agent | None, slugs: dict[int, str] | None = None
) -> dict[str, Any]:
    """The SPEC §4 memory object as seen by `agent` (None: an operator, source by owner)."""
    owner_slug = None
    if memory.agent_id is not None:
        owner_slug = (slugs or {}).get(memory.agent_id) or memory.agent.slug
    if agent is not None:
        source = source_label(memory, agent, {memory.agent_id: owner_slug} if owner_slug else None)
    else:
        source = "workspace" if memory.agent_id is None else f"agent:{owner_slug}"
    return {
        "id": memory.id,
        "key": memory.key,
        "category": memory.category,
        "kind": memory.kind,
        "text": memory.text,
        "data": memory.data,
        "tags": list(memory.tags or []),
        "subject_id": memory.subject_id,
        "thread_id": memory.thread_id,
        "importance": memory.importance,
        "confidence": memory.confidence,
        "capture_mode": memory.capture_mode,
        "source_provider": memory.source_provider,
        "mentions": list(memory.mentions or []),
        "expires_at": iso(memory.expires_at),
        "last_confirmed_at": iso(memory.last_confirmed_at),
        "created_at": iso(memory.created_at),
        "updated_at": iso(memory.updated_at),
        "version": memory.version,
        "status": memory.status,
        "review_state": memory.review_state,
        "size_bytes": memory.size_bytes,
        "agent": owner_slug,
        "source": source,
    }


def search_hit_json(
    memory: Memory,
    *,
    agent: Agent,
    relevance: float,
    is_latest: bool = True,
    slugs: dict[int, str] | None = None,
) -> dict[str, Any]:
    """One hit of `POST /api/v1/search` (the LLM-facing format of SPEC §4 Search)."""
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
            "when": iso(memory.updated_at),
            "created_at": iso(memory.created_at),
            "updated_at": iso(memory.updated_at),
            "expires_at": iso(memory.expires_at),
            "mentions": list(memory.mentions or []),
            "tags": list(memory.tags or []),
            "isLatest": is_latest,
        },
        "source": source_label(memory, agent, slugs),
    }

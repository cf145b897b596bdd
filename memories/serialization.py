"""A memory as the agent API shows it: the SPEC §4 `memory` object (never the embedding)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from accounts.models import Agent
from memories.models import Memory
from memories.visibility import source_label

if TYPE_CHECKING:
    from memories.services.store import StoreResult

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


def store_response(result: StoreResult, *, agent: Agent) -> tuple[int, dict[str, Any]]:
    """The status and body of `POST /api/v1/memories` (SPEC §4 Store; the MCP tool returns the
    same body): 201 when inserted, 200 when updated or already remembered."""
    memory = result.memory
    body: dict[str, Any] = {
        "ok": True,
        "memory_id": memory.id,
        "message": result.message,
        "version": memory.version,
        "memory": memory_json(memory, agent=agent),
    }
    if result.near_duplicates:
        body["near_duplicates"] = [
            {"memory_id": near.id, "text": near.text, "similarity": similarity}
            for near, similarity in result.near_duplicates
        ]
    if result.previously_corrected:
        body["previously_corrected"] = [
            {
                "memory_id": tombstone.id,
                "text": tombstone.text,
                "reason": tombstone.tombstone_reason,
                "tombstoned_at": iso(tombstone.tombstoned_at),
                "similarity": similarity,
            }
            for tombstone, similarity in result.previously_corrected
        ]
    return (201 if result.created else 200), body


# --- the same object built by PostgreSQL --------------------------------------------------------

_TS = "to_json(to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))"
# importance/confidence are validated to 0–1: a whole value keeps its `.0`, as Python writes it.
_UNIT_FLOAT = (
    "CASE WHEN {0} = trunc({0}) THEN to_json({0})::text || '.0' ELSE to_json({0})::text END"
)


def memory_json_sql(table: str = "m", owner: str = "o") -> str:
    """SQL for `memory_json(memory, agent=viewer)` as compact JSON text, one per row of `table`
    joined to its owner agent as `owner`; its one parameter is the viewing agent's id.

    Hydrate returns a hundred or more memory objects; PostgreSQL writes them in a fraction of
    the time Python takes to decode rows and encode dicts. The text is `memory_json`'s JSON:
    same keys in the same order, same values (`data` keeps its stored key order, written with
    jsonb's spacing); tests/memories/test_serialization.py holds the two together.
    """
    c = f"{table}."
    fields = {
        "id": f"to_json({c}id)",
        "key": f"to_json({c}key)",
        "category": f"to_json({c}category)",
        "kind": f"to_json({c}kind)",
        "text": f"to_json({c}text)",
        "data": f"{c}data",
        "tags": f"to_json({c}tags)",
        "subject_id": f"to_json({c}subject_id)",
        "thread_id": f"to_json({c}thread_id)",
        "importance": _UNIT_FLOAT.format(f"{c}importance"),
        "confidence": _UNIT_FLOAT.format(f"{c}confidence"),
        "capture_mode": f"to_json({c}capture_mode)",
        "source_provider": f"to_json({c}source_provider)",
        "mentions": f"COALESCE({c}mentions, '[]'::jsonb)",
        "expires_at": _TS.format(f"{c}expires_at"),
        "last_confirmed_at": _TS.format(f"{c}last_confirmed_at"),
        "created_at": _TS.format(f"{c}created_at"),
        "updated_at": _TS.format(f"{c}updated_at"),
        "version": f"{c}version",
        "status": f"to_json({c}status)",
        "review_state": f"to_json({c}review_state)",
        "size_bytes": f"{c}size_bytes",
        "agent": f"to_json({owner}.slug)",
        "source": (
            f"to_json(CASE WHEN {c}agent_id IS NULL THEN 'workspace' WHEN {c}agent_id = %s "
            f"THEN 'own' ELSE 'shared:' || {owner}.slug END)"
        ),
    }
    assert tuple(fields) == MEMORY_FIELDS
    parts = [
        f"'{',' if i else '{'}\"{name}\":' || COALESCE(({expression})::text, 'null')"
        for i, (name, expression) in enumerate(fields.items())
    ]
    return "(" + " || ".join(parts) + " || '}')"

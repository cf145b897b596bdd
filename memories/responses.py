"""The bodies of the write answers that REST and MCP share: a store and an
ingest. Services return plain results (`StoreResult`, `IngestResult`) that know
nothing of HTTP; this module, above both the services and `memories.serialization`, turns
them into the status and body each surface sends.
"""

from __future__ import annotations

from typing import Any, cast

from accounts.models import Agent
from memories.formation.ingest import IngestResult
from memories.models import Memory
from memories.serialization import iso, memory_json
from memories.services.store import StoreResult


def store_response(result: StoreResult, *, agent: Agent) -> tuple[int, dict[str, Any]]:
    """The status and body of `POST /api/v1/memories` (the MCP tool returns the
    same body): 201 when inserted, 200 when updated, replaced or already remembered."""
    # Only a formed store, answered elsewhere, may have none.
    memory = cast(Memory, result.memory)
    body: dict[str, Any] = {
        "ok": True,
        "memory_id": memory.id,
        "message": result.message,
        "action": result.action,
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


def ingest_response(result: IngestResult) -> tuple[int, dict[str, Any]]:
    """`POST /threads/{id}/messages` and MCP `memory_ingest`: 202 and the ingest body."""
    return 202, {
        "ok": True,
        "thread_id": result.thread.thread_id,
        "accepted": result.accepted,
        "duplicates": result.duplicates,
        "redacted": result.redacted,
        "extraction": result.extraction,
    }

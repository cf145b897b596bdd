"""A memory as the agent API shows it: the `memory` object (never the embedding).

Its fields are `models.PUBLIC_FIELDS`, in that order. A column is written by its type, by one
rule in Python (`memory_json`) and in SQL (`memory_json_sql`); `agent` and `source` come from
the owner and the viewer.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from django.db import models

from accounts.models import Agent
from memories.kind_registry import tool_name
from memories.models import PUBLIC_FIELDS, Kind, Memory, Message, Thread
from memories.visibility import source_label

# Written from the owner and the viewer, not from a column of their own: `agent` is the owner's
# slug (the column holds its id), `source` the viewer's relation to the owner.
_OWNER_FIELDS = ("agent", "source")
_COLUMNS = tuple(
    cast("models.Field[Any, Any]", Memory._meta.get_field(name))  # each one a column
    for name in PUBLIC_FIELDS
    if name not in _OWNER_FIELDS
)


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, always with microseconds (so it round-trips exactly)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _as_list(value: list | None) -> list:
    return list(value or [])


def _python_encoder(field: models.Field) -> Callable[[Any], Any] | None:
    """How `memory_json` writes a column's value (None: as it is)."""
    if isinstance(field, models.DateTimeField):
        return iso
    if field.default is list:  # tags, mentions: always a list
        return _as_list
    return None


_PYTHON_ENCODERS = tuple((field.name, _python_encoder(field)) for field in _COLUMNS)
# The memory columns `memory_json_sql` reads from its table (with the owner's id).
MEMORY_JSON_COLUMNS = ("agent_id", *(field.column for field in _COLUMNS))


def memory_json(
    memory: Memory, *, agent: Agent | None, slugs: dict[int, str] | None = None
) -> dict[str, Any]:
    """The memory object as seen by `agent` (None: an operator, source by owner:
    `agent:<slug>`, `workspace` or `user`)."""
    owner_slug = None
    if memory.agent_id is not None:
        owner_slug = (slugs or {}).get(memory.agent_id) or (
            memory.agent.slug  # type: ignore[union-attr]  # agent_id is set
        )
    source = source_label(
        memory,
        agent,
        {memory.agent_id: owner_slug} if owner_slug else None,  # type: ignore[dict-item]
    )
    out: dict[str, Any] = dict.fromkeys(PUBLIC_FIELDS)  # the keys in the API's order
    for name, encode in _PYTHON_ENCODERS:
        value = getattr(memory, name)
        out[name] = value if encode is None else encode(value)
    out["agent"], out["source"] = owner_slug, source
    return out


# --- the same object built by PostgreSQL --------------------------------------------------------

_TS = "to_json(to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))"
# Floats (importance, confidence: validated to 0–1): a whole value keeps its `.0`, as Python
# writes it.
_UNIT_FLOAT = (
    "CASE WHEN {0} = trunc({0}) THEN to_json({0})::text || '.0' ELSE to_json({0})::text END"
)


def _sql_encoder(field: models.Field, column: str) -> str:
    """SQL writing a column's value as `memory_json` does, as JSON (text or NULL)."""
    if isinstance(field, models.DateTimeField):
        return _TS.format(column)
    if isinstance(field, models.FloatField):
        return _UNIT_FLOAT.format(column)
    if isinstance(field, models.JSONField):
        # jsonb is JSON already: `data` keeps its stored key order, written with jsonb's spacing.
        return f"COALESCE({column}, '[]'::jsonb)" if field.default is list else column
    if isinstance(field, models.IntegerField):
        return column  # a whole number's text is its JSON
    return f"to_json({column})"


def memory_json_sql(
    table: str = "m", owner: str = "o", *, owner_slug: str | None = None, viewer: str = "%s"
) -> str:
    """SQL for `memory_json(memory, agent=viewer)` as compact JSON text, one per row of `table`
    joined to its owner agent as `owner` (or with `owner_slug`, SQL for the owner's slug, where
    there is no such join); `viewer` is SQL for the viewing agent's id (by default its one
    parameter).

    Hydrate returns a hundred or more memory objects; PostgreSQL writes them in a fraction of
    the time Python takes to decode rows and encode dicts. The text is `memory_json`'s JSON:
    same keys in the same order, same values; tests/memories/test_serialization.py holds the
    two together.
    """
    expressions = {field.name: _sql_encoder(field, f"{table}.{field.column}") for field in _COLUMNS}
    slug = owner_slug or f"{owner}.slug"
    expressions["agent"] = f"to_json({slug})"
    expressions["source"] = (
        f"to_json(CASE WHEN {table}.scope = 'user' THEN 'user' "
        f"WHEN {table}.agent_id IS NULL THEN 'workspace' WHEN {table}.agent_id = {viewer} "
        f"THEN 'own' ELSE 'shared:' || {slug} END)"
    )
    parts = [
        f"'{',' if i else '{'}\"{name}\":' || COALESCE(({expressions[name]})::text, 'null')"
        for i, name in enumerate(PUBLIC_FIELDS)
    ]
    return "(" + " || ".join(parts) + " || '}')"


# --- conversations -----------------------------------------------------------------------------


def thread_json(thread: Thread, extraction: dict[str, Any]) -> dict[str, Any]:
    return {
        "thread_id": thread.thread_id,
        "subject_id": thread.subject_id,
        "message_count": thread.message_count,
        "summary": thread.summary,
        "last_message_at": iso(thread.last_message_at),
        "ended_at": iso(thread.ended_at),
        "extraction": extraction,
    }


def message_json(message: Message) -> dict[str, Any]:
    return {
        "seq": message.seq,
        "role": message.role,
        "content": message.content,
        "name": message.name,
        "created_at": iso(message.created_at),
        "redactions": list(message.redactions),
    }


# --- the kind registry --------------------------------------------------------------------------


def kind_json(kind: Kind) -> dict[str, Any]:
    return {
        "name": kind.name,
        "cardinality": kind.cardinality,
        "memory_type": kind.memory_type,
        "description": kind.description,
        "schema": kind.schema,
        "default_category": kind.default_category,
        "tool": tool_name(kind.name) if kind.schema is not None else None,
        "created_at": iso(kind.created_at),
        "updated_at": iso(kind.updated_at),
    }

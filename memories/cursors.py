"""Keyset cursors: the one implementation behind the API list and the console lists.

A cursor is opaque to whoever holds it: URL-safe base64 (padding stripped) of a small JSON
array naming where the last page ended. The next page is the rows strictly after that
(sort value, id) position, read off a (sort value, id) index: no OFFSET, so every page is
complete and costs the same however deep the walk goes.

Two shapes are handed out, and each must stay byte for byte what it is (API clients store
theirs, console links carry theirs):

- `WalkCursor` (`GET /api/v1/memories`): `[as_of, updated_at, id]`, json's default separators.
- `encode_position` (console tables): `[value, id]`, compact, a datetime as `{"t": iso}`.
"""

from __future__ import annotations

import base64
import json
from contextlib import suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet

from memories import validation
from memories.ids import is_memory_id
from memories.serialization import iso
from memoryhub.errors import InvalidInput

_COMPACT = (",", ":")


def encode(values: list[Any], *, compact: bool = True) -> str:
    raw = json.dumps(values, separators=_COMPACT if compact else None)
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode(cursor: str) -> Any:
    """The JSON inside a cursor; ValueError (or a subclass) when it is not one."""
    padded = cursor + "=" * (-len(cursor) % 4)
    try:
        return json.loads(base64.urlsafe_b64decode(padded.encode()))
    except RecursionError:  # a forged cursor nested deeper than the JSON parser can go
        raise ValueError("cursor nested too deep") from None


def after(field_name: str, value: Any, pk: Any, *, desc: bool) -> Q:
    """The rows strictly after `(value, pk)` in `(field_name, id)` order (both descending when
    `desc`): the keyset condition every page but the first filters on."""
    op = "lt" if desc else "gt"
    return Q(**{f"{field_name}__{op}": value}) | Q(**{field_name: value, f"id__{op}": pk})


# --- the API's walk --------------------------------------------------------------------------


@dataclass(frozen=True)
class WalkCursor:
    """Where an API list walk is: the time it began (`as_of`) and the
    (updated_at-as-of-then, id) of the last row returned; no row yet on the first page."""

    as_of: datetime
    updated_at: datetime | None = None
    memory_id: str | None = None

    def encode(self) -> str:
        # json's default separators: the API has always written its cursors so.
        return encode([iso(self.as_of), iso(self.updated_at), self.memory_id], compact=False)

    @classmethod
    def decode(cls, cursor: str) -> WalkCursor:
        try:
            as_of, updated_at, memory_id = decode(cursor)
            if not is_memory_id(memory_id):
                raise ValueError
            return cls(
                as_of=validation.parse_timestamp(as_of, "cursor"),
                updated_at=validation.parse_timestamp(updated_at, "cursor"),
                memory_id=memory_id,
            )
        except (ValueError, TypeError, InvalidInput):
            raise InvalidInput(
                "'cursor' is not a cursor this API returned", field="cursor"
            ) from None

    def before(self, field_name: str) -> Q:
        """The rows after this position in the walk's newest-first order (all on page one)."""
        if self.updated_at is None:
            return Q()
        return after(field_name, self.updated_at, self.memory_id, desc=True)


# --- the console's tables --------------------------------------------------------------------


def encode_position(value: Any, pk: Any) -> str:
    if isinstance(value, datetime):
        value = {"t": value.isoformat()}
    return encode([value, pk])


def decode_position(cursor: str) -> tuple[Any, Any] | None:
    """`(value, pk)` from a cursor, or None for a malformed one (which restarts the list)."""
    try:
        value, pk = decode(cursor)
        if isinstance(value, dict):
            value = datetime.fromisoformat(value["t"])
        return value, pk
    except (ValueError, TypeError, KeyError):
        return None


def keyset_page(
    qs: QuerySet, *, field_name: str, desc: bool, cursor: str | None, size: int
) -> tuple[list[Any], str | None]:
    """One page of `qs` in `(field_name, id)` order after `cursor`, and the next page's cursor
    (None on the last page)."""
    qs = qs.order_by(*([f"-{field_name}", "-id"] if desc else [field_name, "id"]))
    position = decode_position(cursor) if cursor else None
    if position is not None:
        # A hand-edited cursor of the wrong type restarts the list rather than failing.
        with suppress(ValueError, TypeError, ValidationError):
            qs = qs.filter(after(field_name, *position, desc=desc))
    rows = list(qs[: size + 1])
    if len(rows) <= size:
        return rows, None
    rows = rows[:size]
    last = rows[-1]
    return rows, encode_position(getattr(last, field_name), last.pk)

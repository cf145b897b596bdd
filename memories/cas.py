"""Compare-and-set preconditions (docs/api.md): `expected_version`, `expected_updated_at`, or a
PATCH's `If-Match`, parsed from raw input into a `Cas` the writes check (`services.writes`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memories.validation import MAX_VERSION, parse_timestamp
from memoryhub.errors import InvalidInput


@dataclass(frozen=True)
class Cas:
    """A compare-and-set precondition. `create_only`: the key must not exist yet."""

    version: int | None = None
    updated_at: datetime | None = None
    create_only: bool = False


def cas(data: dict[str, Any], if_match: str | None = None) -> Cas | None:
    has_version = data.get("expected_version") is not None
    has_updated = "expected_updated_at" in data
    if has_version and has_updated:
        raise InvalidInput(
            "Give 'expected_version' or 'expected_updated_at', not both", field="expected_version"
        )
    if if_match is not None and not has_version and not has_updated:
        return cas({"expected_version": parse_if_match(if_match)})
    if has_version:
        value = data["expected_version"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERSION:
            raise InvalidInput(
                "'expected_version' must be a non-negative integer", field="expected_version"
            )
        return Cas(create_only=True) if value == 0 else Cas(version=value)
    if has_updated:
        value = data["expected_updated_at"]
        if value is None:
            return Cas(create_only=True)
        return Cas(updated_at=parse_timestamp(value, "expected_updated_at"))
    return None


def parse_if_match(value: str) -> int:
    raw = value.strip()
    if raw.startswith("W/"):
        raw = raw[2:]
    raw = raw.strip('"')
    if not raw.isascii() or not raw.isdigit() or int(raw) > MAX_VERSION:
        raise InvalidInput('If-Match must be a version such as "3"', field="If-Match")
    return int(raw)

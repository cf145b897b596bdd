"""Durations written as `30s`, `15m`, `1h`, `24h`, `7d` (integer + unit)."""

from __future__ import annotations

import re
from datetime import timedelta

_RE = re.compile(r"^\s*(\d{1,9})\s*([smhd])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str) -> timedelta:
    match = _RE.fullmatch(value) if isinstance(value, str) else None
    if not match:
        raise ValueError("Use an integer and a unit s, m, h or d, e.g. 30s, 15m, 24h, 7d")
    amount = int(match.group(1))
    if amount <= 0:
        raise ValueError("A duration must be positive")
    return timedelta(seconds=amount * _UNITS[match.group(2)])


def format_duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"

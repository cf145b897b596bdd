"""Public memory ids: `mem_` + a ULID (time-ordered, 26 Crockford base32 characters)."""

from __future__ import annotations

import os
import re
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MEMORY_ID_RE = re.compile(r"^mem_[0-9A-HJKMNP-TV-Z]{26}$")


def new_ulid(timestamp_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    value = (ms << 80) | int.from_bytes(os.urandom(10), "big")
    chars = []
    for _ in range(26):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "".join(reversed(chars))


def new_memory_id() -> str:
    return "mem_" + new_ulid()


def is_memory_id(value: object) -> bool:
    return isinstance(value, str) and bool(MEMORY_ID_RE.fullmatch(value))

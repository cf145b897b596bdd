"""Content fingerprints: what dedup compares (the normalised text and its hash), what is
embedded, and the size a memory counts against hydrate's budget."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from typing import Any

_WS_RE = re.compile(r"\s+")


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def normalise_text(value: str) -> str:
    """The text dedup compares: NFKC, case-folded, whitespace collapsed, end punctuation off."""
    value = unicodedata.normalize("NFKC", value).casefold()
    return _WS_RE.sub(" ", value).strip().rstrip(".!?;,").strip()


def content_hash(text_value: str, data_value: dict | None) -> str:
    basis = normalise_text(text_value) if text_value.strip() else compact_json(data_value)
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def embedding_text(text_value: str, data_value: dict | None) -> str:
    return text_value if text_value.strip() else compact_json(data_value or {})


def size_bytes(text_value: str, data_value: dict | None) -> int:
    size = len(text_value.encode("utf-8"))
    if data_value is not None:
        size += len(
            json.dumps(data_value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        )
    return size

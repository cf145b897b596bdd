"""Parse and validate raw agent input (a REST body or MCP tool arguments), field by field.

Both the REST views and the MCP tools hand the raw JSON object to the services, which call
these parsers (a store's and a PATCH's whole body: `memories.inputs`): one set of rules, one
set of `INVALID_INPUT` errors (each naming its field). Nothing here touches the database.
"""

from __future__ import annotations

import math
import re
import unicodedata
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from memories.fingerprints import compact_json
from memories.secrets_scan import INVISIBLE_CHARS, find_secret
from memoryhub.durations import parse_duration
from memoryhub.errors import InvalidInput, SecretRejected

# Matched whole (`fullmatch`; CATEGORY_RE also ends in `\Z`, for callers that `match` it): `$`
# alone would also match before a final "\n", and so admit `core\n`.
CATEGORY_RE = re.compile(r"^[a-z0-9_-]{1,40}\Z")
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9:_./-]{0,63}$")
KIND_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$")
MAX_TAGS = 32
MAX_MENTIONS = 50
MAX_ID_CHARS = 255  # key, subject_id, thread_id
DEDUP_POLICIES = ("ask", "skip_if_near", "insert")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_WS_RE = re.compile(r"\s+")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
MAX_DEPTH = 32  # nesting of JSON input
MAX_VERSION = 2**31 - 1  # the version column is a PostgreSQL integer

# Refused in keys besides the invisible ones: controls, surrogates, line/paragraph separators.
_KEY_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

_MISSING = object()


# --- small field parsers ---------------------------------------------------------------------


def _check_string(value: str, field: str) -> None:
    if "\x00" in value:
        raise InvalidInput("NUL bytes are not allowed", field=field)
    if _SURROGATE_RE.search(value):
        raise InvalidInput("Strings must be valid Unicode (lone surrogate)", field=field)


def reject_nul(value: Any, field: str = "body", _depth: int = 0, *, finite: bool = False) -> None:
    """PostgreSQL cannot store NUL (nor unpaired surrogates) in text or jsonb: refuse them
    anywhere in the input, naming the field. Also bounds nesting depth. With `finite`, NaN and
    Infinity are refused too (jsonb has neither, and MCP's parser accepts them)."""
    if _depth > MAX_DEPTH:
        raise InvalidInput(f"JSON nested deeper than {MAX_DEPTH} levels", field=field)
    if isinstance(value, str):
        _check_string(value, field)
    elif finite and isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput("Numbers must be finite (no NaN or Infinity)", field=field)
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str):
                _check_string(k, field)
            key_field = f"{field}.{k}" if field != "body" else str(k)
            reject_nul(v, key_field, _depth + 1, finite=finite)
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            reject_nul(item, f"{field}[{i}]", _depth + 1, finite=finite)


def require_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput("The body must be a JSON object", field="body")
    reject_nul(data, finite=True)
    return data


def reject_unknown(data: dict[str, Any], allowed: frozenset[str], where: str = "") -> None:
    """INVALID_INPUT naming the first field not `allowed` (`where`: `data`'s path, if nested);
    SECRET_REJECTED naming only `where` when a field name is a secret: never echoed."""
    if unknown := sorted(k for k in data if k not in allowed):
        if finding := find_secret(unknown, where or "body"):
            raise SecretRejected(details={"rule": finding.rule, "field": where or "body"})
        path = ".".join(filter(None, (where, unknown[0][:60])))
        raise InvalidInput(f"Unknown field '{path}'", field=path)


def identifier(value: Any, field: str, *, max_len: int = MAX_ID_CHARS) -> str | None:
    """An opaque id (key, subject_id, thread_id): trimmed, no control characters; '' → None."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"'{field}' must be a string", field=field)
    value = value.strip()
    if not value:
        return None
    if len(value) > max_len:
        raise InvalidInput(f"'{field}' is longer than {max_len} characters", field=field)
    if _CONTROL_RE.search(value):
        raise InvalidInput(f"'{field}' contains control characters", field=field)
    return value


def memory_key(value: Any, field: str = "key") -> str | None:
    """A memory key: NFKC-normalised, so full-width and other compatibility
    forms name the same key; control and invisible characters (zero-width, bidi controls,
    fillers) are refused rather than dropped, so look-alike keys cannot coexist."""
    if isinstance(value, str):
        if any(
            ch in INVISIBLE_CHARS or unicodedata.category(ch) in _KEY_REFUSED_CATEGORIES
            for ch in value
        ):
            raise InvalidInput(
                f"'{field}' contains control characters or invisible ones", field=field
            )
        value = unicodedata.normalize("NFKC", value)
    return identifier(value, field)


def key_prefix(value: Any) -> str | None:
    """A `key_prefix` filter (list, keys, search): a key's rules (NFKC, no control or invisible
    characters, at most a key's length) but not trimmed, since a prefix may end in a space."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidInput("'key_prefix' must be a string", field="key_prefix")
    memory_key(value, "key_prefix")  # refuses control and invisible characters
    value = unicodedata.normalize("NFKC", value)
    if len(value) > MAX_ID_CHARS:
        raise InvalidInput(f"'key_prefix' is over {MAX_ID_CHARS} characters", field="key_prefix")
    return value


def unit_float(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"'{field}' must be a number between 0 and 1", field=field)
    try:
        value = float(value)
    except OverflowError:
        value = math.inf
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidInput(f"'{field}' must be a number between 0 and 1", field=field)
    return value


def parse_timestamp(value: Any, field: str) -> datetime:
    """ISO 8601 (a naive one is read as UTC) or Unix milliseconds → an aware UTC datetime."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError
            return datetime.fromtimestamp(value / 1000, tz=UTC)
        if isinstance(value, str) and 0 < len(value) <= 64:
            parsed = datetime.fromisoformat(value.strip())
            if parsed.tzinfo is None:
                parsed = parsed.replace(tzinfo=UTC)
            return parsed.astimezone(UTC)
        raise ValueError
    except (ValueError, OverflowError, OSError):
        raise InvalidInput(
            f"'{field}' must be an ISO 8601 timestamp or Unix milliseconds", field=field
        ) from None


def occurred(value: Any) -> datetime | None:
    """`occurred_at`: when the recorded event happened (null: not temporal), any time."""
    return None if value is None else parse_timestamp(value, "occurred_at")


def category(value: Any, *, default: str) -> str:
    if value is None:
        return default
    if not isinstance(value, str) or not CATEGORY_RE.fullmatch(value):
        raise InvalidInput(
            "'category' must match [a-z0-9_-]{1,40} (core, daily, conversation, workspace, "
            "archival or a custom name)",
            field="category",
        )
    return value


def kind(value: Any) -> str:
    if value is None:
        return "fact"
    if not isinstance(value, str) or not KIND_RE.fullmatch(value):
        raise InvalidInput("'kind' must be a short name such as fact or UserProfile", field="kind")
    return value


def normalise_tag(raw: Any) -> str:
    """Trim, lower-case, inner whitespace → `-`; the result must match TAG_RE."""
    if not isinstance(raw, str):
        raise InvalidInput("Each tag must be a string", field="tags")
    tag = _WS_RE.sub("-", raw.strip().lower())
    if not TAG_RE.fullmatch(tag):
        raise InvalidInput(
            "Each tag must match [a-z0-9][a-z0-9:_./-]{0,63} after normalisation", field="tags"
        )
    return tag


def tags(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidInput("'tags' must be a list of strings", field="tags")
    out = list(dict.fromkeys(normalise_tag(t) for t in value))
    if len(out) > MAX_TAGS:
        raise InvalidInput(f"At most {MAX_TAGS} tags", field="tags")
    return out


def text(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidInput("'text' must be a string", field="text")
    if len(value) > settings.MAX_TEXT_CHARS:
        raise InvalidInput(
            f"'text' is longer than {settings.MAX_TEXT_CHARS} characters",
            field="text",
            details={"limit_chars": settings.MAX_TEXT_CHARS},
        )
    return value


def data_object(value: Any) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidInput("'data' must be a JSON object", field="data")
    if len(compact_json(value).encode("utf-8")) > settings.MEMORYHUB_MAX_DATA_BYTES:
        raise InvalidInput(
            f"'data' is larger than {settings.MEMORYHUB_MAX_DATA_BYTES} bytes",
            field="data",
            details={"limit_bytes": settings.MEMORYHUB_MAX_DATA_BYTES},
        )
    return value


def mentions(value: Any) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_MENTIONS:
        raise InvalidInput(
            f"'mentions' must be a list of at most {MAX_MENTIONS} {{name, type}} objects",
            field="mentions",
        )
    out = []
    for item in value:
        if not isinstance(item, dict) or set(item) - {"name", "type"}:
            raise InvalidInput("Each mention is an object {name, type}", field="mentions")
        name = item.get("name")
        kind_ = item.get("type", "entity")
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise InvalidInput("Each mention needs a name (≤ 200 characters)", field="mentions")
        if not isinstance(kind_, str) or not kind_.strip() or len(kind_) > 64:
            raise InvalidInput("A mention's type is a short string", field="mentions")
        out.append({"name": name.strip(), "type": kind_.strip()})
    return out


def short_string(value: Any, field: str, max_len: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > max_len:
        raise InvalidInput(
            f"'{field}' must be a string of at most {max_len} characters", field=field
        )
    return value.strip() or None


def choice(value: Any, field: str, choices: tuple[str, ...], default: str) -> str:
    if value is None:
        return default
    if value not in choices:
        raise InvalidInput(f"'{field}' must be one of {', '.join(choices)}", field=field)
    return value


def expiry(data: dict[str, Any], *, now: datetime) -> Any:
    """`ttl` or `expires_at` → a datetime, None (explicit null: no expiry) or _MISSING."""
    if "ttl" in data and data["ttl"] is not None:
        if data.get("expires_at") is not None:
            raise InvalidInput("Give either 'ttl' or 'expires_at', not both", field="ttl")
        try:
            return now + parse_duration(data["ttl"])
        except ValueError as exc:
            raise InvalidInput(str(exc), field="ttl") from None
        except OverflowError:
            raise InvalidInput("'ttl' is too long", field="ttl") from None
    if "expires_at" in data:
        if data["expires_at"] is None:
            return None
        when = parse_timestamp(data["expires_at"], "expires_at")
        if when <= now:
            raise InvalidInput("'expires_at' must be in the future", field="expires_at")
        return when
    return _MISSING


def thread(data: dict[str, Any]) -> str | None:
    thread_id = identifier(data.get("thread_id"), "thread_id")
    session_id = identifier(data.get("session_id"), "session_id")
    if thread_id and session_id and thread_id != session_id:
        raise InvalidInput("'thread_id' and 'session_id' differ", field="session_id")
    return thread_id or session_id


def parse_bool(value: Any, field: str, default: bool) -> bool:
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "1", "yes"}:
        return True
    if isinstance(value, str) and value.lower() in {"false", "0", "no"}:
        return False
    raise InvalidInput(f"'{field}' must be true or false", field=field)


def parse_limit(value: Any, *, default: int = 50, maximum: int = 200) -> int:
    if value is None or value == "":
        return default
    try:
        limit = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"'limit' must be an integer 1–{maximum}", field="limit") from None
    if isinstance(value, bool) or not 1 <= limit <= maximum:
        raise InvalidInput(f"'limit' must be an integer 1–{maximum}", field="limit")
    return limit

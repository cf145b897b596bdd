"""What the model answers with: typed operations, their JSON schemas, and the parser.

The answer to an extraction is exactly `{"operations": [...]}`, each operation one of

    {"op": "add", "text", "key": str | null, "category", "kind", "data": str | null,
     "scope": "agent" | "user", "tags": [str], "confidence", "mentions": [{"name", "type"}],
     "occurred_at": str | null, "evidence": [seq]}
    {"op": "update", "memory_id", "version", "text", "confidence", "evidence": [seq]}
    {"op": "forget", "memory_id", "version", "reason", "evidence": [seq]}
    {"op": "confirm", "memory_id", "evidence": [seq]}

and the answer to a summary is `{"summary": "..."}`. An add's `data` (the memory's structured
data, for a kind with a schema) is written as the JSON text of an object, because
strict structured outputs cannot describe an open object; an object in its place (a server that
does not enforce the schema) is taken as it is. The parser checks shape only (JSON, the known
ops, the types of their fields, `data` an object) and raises `OutputError` with a short reason
otherwise.
Whether an operation may be applied (secrets, confidence thresholds, allowed categories,
evidence within the run's messages, `data` against its kind's schema, whether `scope: "user"` is
honoured, the memory still at that version) is the apply step's business, not this module's.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, cast

__all__ = [
    "ADD_SCOPES",
    "OPERATIONS_SCHEMA",
    "OPERATIONS_SCHEMA_NAME",
    "SUMMARY_SCHEMA",
    "SUMMARY_SCHEMA_NAME",
    "AddOp",
    "ConfirmOp",
    "ForgetOp",
    "Mention",
    "Operation",
    "OutputError",
    "UpdateOp",
    "operation_json",
    "parse_operations",
    "parse_summary",
]


class OutputError(ValueError):
    """The model's reply is not the JSON shape asked for; `reason` says what is wrong."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity a memory names (`{"name": "Lisbon", "type": "place"}`)."""

    name: str
    type: str


@dataclass(frozen=True, slots=True)
class AddOp:
    """Remember a new fact. `evidence` holds the seqs of the messages it comes from."""

    op: ClassVar[str] = "add"

    text: str
    key: str | None
    category: str
    kind: str
    tags: list[str]
    confidence: float
    mentions: list[Mention]
    occurred_at: str | None
    evidence: list[int]
    # The memory's structured data (checked against its kind's schema when it is applied).
    data: dict[str, Any] | None = None
    # `user`: a fact about the person for every agent serving them, honoured only
    # for a thread with a subject whose agent allows it (`formation_user_scope`).
    scope: str = "agent"


@dataclass(frozen=True, slots=True)
class UpdateOp:
    """Replace the text of a related memory, provided it is still at `version`."""

    op: ClassVar[str] = "update"

    memory_id: str
    version: int
    text: str
    confidence: float
    evidence: list[int]


@dataclass(frozen=True, slots=True)
class ForgetOp:
    """Tombstone a related memory the conversation contradicts, provided it is still at `version`."""

    op: ClassVar[str] = "forget"

    memory_id: str
    version: int
    reason: str
    evidence: list[int]


@dataclass(frozen=True, slots=True)
class ConfirmOp:
    """A related memory was restated: it is still true (refreshes `last_confirmed_at`)."""

    op: ClassVar[str] = "confirm"

    memory_id: str
    evidence: list[int]


Operation = AddOp | UpdateOp | ForgetOp | ConfirmOp


# --- JSON schemas -------------------------------------------------------------------------------
# Written for OpenAI's strict structured outputs, the strictest of the servers we target: every
# object lists all its properties as required (optional ones are nullable instead) and forbids
# others, the root is an object, and the op kinds are an anyOf (allowed below the root) told
# apart by a one-value enum. No numeric bounds: not every server's grammar compiler takes them;
# the parser checks them instead.

OPERATIONS_SCHEMA_NAME = "memory_operations"
SUMMARY_SCHEMA_NAME = "thread_summary"


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def _op(name: str) -> dict[str, Any]:
    return {"type": "string", "enum": [name]}


_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}
_INTEGER = {"type": "integer"}
_NUMBER = {"type": "number"}
_EVIDENCE = {"type": "array", "items": {"type": "integer"}}
ADD_SCOPES = ("agent", "user")

OPERATIONS_SCHEMA: dict[str, Any] = _object(
    {
        "operations": {
            "type": "array",
            "items": {
                "anyOf": [
                    _object(
                        {
                            "op": _op("add"),
                            "text": _STRING,
                            "key": _NULLABLE_STRING,
                            "category": _STRING,
                            "kind": _STRING,
                            "data": _NULLABLE_STRING,
                            "scope": {"type": "string", "enum": list(ADD_SCOPES)},
                            "tags": {"type": "array", "items": _STRING},
                            "confidence": _NUMBER,
                            "mentions": {
                                "type": "array",
                                "items": _object({"name": _STRING, "type": _STRING}),
                            },
                            "occurred_at": _NULLABLE_STRING,
                            "evidence": _EVIDENCE,
                        }
                    ),
                    _object(
                        {
                            "op": _op("update"),
                            "memory_id": _STRING,
                            "version": _INTEGER,
                            "text": _STRING,
                            "confidence": _NUMBER,
                            "evidence": _EVIDENCE,
                        }
                    ),
                    _object(
                        {
                            "op": _op("forget"),
                            "memory_id": _STRING,
                            "version": _INTEGER,
                            "reason": _STRING,
                            "evidence": _EVIDENCE,
                        }
                    ),
                    _object({"op": _op("confirm"), "memory_id": _STRING, "evidence": _EVIDENCE}),
                ]
            },
        }
    }
)

SUMMARY_SCHEMA: dict[str, Any] = _object({"summary": _STRING})


# --- Parsing ------------------------------------------------------------------------------------


def parse_operations(content: str) -> list[Operation]:
    """The operations in a reply, or `OutputError` if any part of it is malformed.

    All or nothing: one bad operation rejects the whole answer, because the caller applies an
    answer as a unit and a model that garbles one operation is not to be trusted with the rest.
    """
    operations = _find_object(content, key="operations")["operations"]
    if not isinstance(operations, list):
        raise OutputError("'operations' is not a list")
    return [_parse_operation(item, where=f"operations[{i}]") for i, item in enumerate(operations)]


def parse_summary(content: str) -> str:
    """The summary text in a reply, or `OutputError`."""
    summary = _find_object(content, key="summary")["summary"]
    if not isinstance(summary, str):
        raise OutputError("'summary' is not a string")
    return summary


# Reasoning models served locally (DeepSeek-R1, Qwen3 under Ollama, ...) put their thinking in
# the content; braces in it must not be taken for the answer.
_THINKING = re.compile(r"<think>.*?</think>", re.DOTALL)


def _find_object(content: str, *, key: str) -> dict[str, Any]:
    """The first JSON object in `content` that has `key`.

    A server that enforces the format replies with bare JSON; one that does not (`prompt` mode,
    or a server ignoring `response_format`) may wrap it in ```json fences or a sentence, so the
    object is looked for wherever it starts.
    """
    text = _THINKING.sub("", content).strip()
    if not text:
        raise OutputError("the reply is empty")
    decoder = json.JSONDecoder()
    saw_object = False
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            value = None
        if isinstance(value, dict):
            if key in value:
                return value
            saw_object = True
        start = text.find("{", start + 1)
    if saw_object:
        raise OutputError(f"the JSON object has no '{key}'")
    raise OutputError("the reply holds no JSON object")


def _parse_operation(item: object, *, where: str) -> Operation:
    if not isinstance(item, dict):
        raise OutputError(f"{where} is not an object")
    fields = _Fields(item, where=where)
    op = item.get("op")
    if op == "add":
        return AddOp(
            text=fields.string("text"),
            # Optional in meaning, so a model outside strict mode that leaves them out has not
            # garbled anything: absent reads as null / empty / the default kind.
            key=fields.optional_string("key"),
            category=fields.string("category"),
            kind=fields.string("kind", default="fact"),
            tags=fields.strings("tags"),
            confidence=fields.confidence(),
            mentions=fields.mentions(),
            occurred_at=fields.optional_string("occurred_at"),
            evidence=fields.evidence(),
            data=fields.data(),
            scope=fields.scope(),
        )
    if op == "update":
        return UpdateOp(
            memory_id=fields.string("memory_id"),
            version=fields.integer("version"),
            text=fields.string("text"),
            confidence=fields.confidence(),
            evidence=fields.evidence(),
        )
    if op == "forget":
        return ForgetOp(
            memory_id=fields.string("memory_id"),
            version=fields.integer("version"),
            reason=fields.string("reason"),
            evidence=fields.evidence(),
        )
    if op == "confirm":
        return ConfirmOp(memory_id=fields.string("memory_id"), evidence=fields.evidence())
    if "op" not in item:
        raise OutputError(f"{where} has no 'op'")
    # The value is the model's, so it is named only when it looks like an op name: anything
    # else (a token, a sentence) is not echoed into the run's error.
    shown = repr(op) if isinstance(op, str) and _OP_NAME.fullmatch(op) else "(not shown)"
    raise OutputError(f"{where} has an unknown op {shown}")


_OP_NAME = re.compile(r"[a-z_]{1,20}")


_MISSING = object()


class _Fields:
    """Typed reads of one operation's fields, each failing with the field's path."""

    def __init__(self, item: dict[str, Any], *, where: str) -> None:
        self.item = item
        self.where = where

    def _get(self, name: str, default: object = _MISSING) -> object:
        if name in self.item:
            return self.item[name]
        if default is _MISSING:
            raise OutputError(f"{self.where} has no '{name}'")
        return default

    def _wrong(self, name: str, expected: str) -> OutputError:
        return OutputError(f"{self.where}.{name} is not {expected}")

    def string(self, name: str, *, default: str | object = _MISSING) -> str:
        value = self._get(name, default)
        if not isinstance(value, str):
            raise self._wrong(name, "a string")
        return value

    def optional_string(self, name: str) -> str | None:
        value = self._get(name, None)
        if value is not None and not isinstance(value, str):
            raise self._wrong(name, "a string or null")
        return value

    def integer(self, name: str) -> int:
        value = self._get(name)
        # bool is an int to Python, never to a JSON schema.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self._wrong(name, "an integer")
        return value

    def strings(self, name: str) -> list[str]:
        value = self._get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(name, "a list of strings")
        return value

    def confidence(self) -> float:
        value = self._get("confidence")
        if (
            not isinstance(value, int | float)
            or isinstance(value, bool)
            or not math.isfinite(value)
            or not 0 <= value <= 1
        ):
            raise self._wrong("confidence", "a number from 0 to 1")
        return float(value)

    def evidence(self) -> list[int]:
        value = self._get("evidence")
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self._wrong("evidence", "a list of message seqs (integers)")
        return value

    def data(self) -> dict[str, Any] | None:
        """An add's `data`: null, a JSON object, or the JSON text of one."""
        value = self._get("data", None)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except (ValueError, RecursionError):
                raise self._wrong("data", "the JSON text of an object") from None
        if value is not None and not isinstance(value, dict):
            raise self._wrong("data", "a JSON object or null")
        return value

    def scope(self) -> str:
        value = self._get("scope", None)
        if value is None:
            return "agent"
        if value not in ADD_SCOPES:
            raise self._wrong("scope", '"agent" or "user"')
        return cast(str, value)  # one of ADD_SCOPES

    def mentions(self) -> list[Mention]:
        value = self._get("mentions", [])
        if not isinstance(value, list):
            raise self._wrong("mentions", "a list")
        mentions = []
        for i, mention in enumerate(value):
            if not (
                isinstance(mention, dict)
                and isinstance(mention.get("name"), str)
                and isinstance(mention.get("type"), str)
            ):
                raise self._wrong(f"mentions[{i}]", 'an object {"name": str, "type": str}')
            mentions.append(Mention(name=mention["name"], type=mention["type"]))
        return mentions


def operation_json(operation: Operation) -> dict[str, Any]:
    """An operation as the model wrote it (`parse_operations` reads it back unchanged)."""
    return {"op": operation.op, **asdict(operation)}

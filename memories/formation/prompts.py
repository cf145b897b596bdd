"""The versioned prompt files of memory formation, and how a thread is rendered into them.

A prompt lives in `prompts/<name>.v<n>.md` (package data), read once per process. Its wording
is never edited in place: a new version is a new file, and `EXTRACT_PROMPT` /
`SUMMARIZE_PROMPT` name the one in use, which every answer records as its `prompt_version`.

In the rendered thread each new message appears as `[<seq>] <role>: <content>`, each earlier
message shown for context as `[<seq>] (earlier) <role>: <content>`, and each
related memory as `(<memory_id> v<version> <category>) <text>`, with `(read-only)`
after the parenthesis for one the model may not change and `(user)` for one of the
subject's user-scoped memories, then its key, kind and data when it has them. The
tenant's kinds are listed one a line, bounded in size. Text is laid out so that
nothing in it can pass for the prompt's own structure: every line break of every kind (`\n`,
`\r\n`, `\r`, `\v`, `\f`, U+001C-U+001E, U+0085, U+2028, U+2029: what `str.splitlines` breaks on)
in a message, memory or summary becomes a newline followed by an indent, so no line of it starts
at the left margin; a sender's name, a memory's key and kind, and a kind's name and description,
one-line fields, have their breaks replaced by spaces; JSON (a schema, a memory's data) is
written with every non-ASCII character escaped, so it holds no line break at all.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from string import Template
from typing import Any

__all__ = [
    "EXTRACT_PROMPT",
    "SUMMARIZE_PROMPT",
    "Prompt",
    "PromptKind",
    "PromptMemory",
    "PromptMessage",
    "extraction_messages",
    "load_prompt",
    "summary_messages",
]

EXTRACT_PROMPT = "extract.v3"
SUMMARIZE_PROMPT = "summarize.v1"


@dataclass(frozen=True, slots=True)
class PromptMessage:
    """One stored message of the thread, as the model sees it.

    `created_at`, when given, places the message under a day line (`--- 2025-05-08 (Thursday)
    ---`), which is how the model resolves "yesterday" into an `occurred_at`.
    """

    seq: int
    role: str
    content: str
    name: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PromptMemory:
    """A live memory related to the new messages, which the model may update, forget or confirm,
    unless it is `read_only` (shown for context only)."""

    memory_id: str
    key: str | None
    version: int
    category: str
    text: str
    read_only: bool = False
    user: bool = False  # one of the subject's user-scoped memories
    kind: str = "fact"
    data: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class PromptKind:
    """A kind of the tenant's registry, as the model reads it."""

    name: str
    single: bool
    description: str
    schema: dict[str, Any] | None


# Bounds of what the kinds and a memory's data may add to a prompt (characters).
KIND_DESCRIPTION_CHARS = 300
KIND_SCHEMA_CHARS = 2000
KINDS_MAX_CHARS = 6000
MEMORY_DATA_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt file: the system message, the user message template, the schema addendum."""

    version: str
    system: str
    user: Template
    schema: Template


_SECTION = re.compile(r"^<!-- (system|user|schema) -->[ \t]*\n", re.MULTILINE)
# The user section's placeholders differ per prompt; `substitute` names any that goes unfilled.
_PLACEHOLDERS: dict[str, set[str]] = {"system": set(), "schema": {"schema"}}


@functools.cache
def load_prompt(version: str) -> Prompt:
    """Read `prompts/<version>.md` once; a file missing a section or placeholder fails loudly."""
    source = importlib.resources.files("memories.formation").joinpath(f"prompts/{version}.md")
    text = source.read_text(encoding="utf-8")
    # What precedes the first marker is the file's own note to maintainers, never sent.
    parts = _SECTION.split(text)[1:]
    sections = {parts[i]: parts[i + 1].strip() for i in range(0, len(parts), 2)}
    if set(sections) != {"system", "user", "schema"}:
        raise ValueError(f"prompt {version}: needs exactly the sections system, user and schema")
    for name, expected in _PLACEHOLDERS.items():
        found = set(Template(sections[name]).get_identifiers())
        if found != expected:
            raise ValueError(f"prompt {version}: unexpected placeholders in {name}: {found}")
    return Prompt(
        version=version,
        system=Template(sections["system"]).substitute(),  # turns $$ into $
        user=Template(sections["user"]),
        schema=Template(sections["schema"]),
    )


def extraction_messages(
    *,
    summary: str,
    messages: list[PromptMessage],
    memories: list[PromptMemory],
    schema: dict[str, Any] | None,
    earlier: Sequence[PromptMessage] = (),
    kinds: Sequence[PromptKind] = (),
    user_scope: bool = False,
) -> list[dict[str, str]]:
    """The chat messages of an extraction request.

    `earlier` are messages before the watermark, shown as read-only context; `kinds` the
    tenant's kinds; `user_scope` whether an `add` may be user-scoped in this thread. `schema` is
    given when the server does not enforce it (`json_object`, `prompt`), so that the model
    reads the exact shape instead.
    """
    return _chat(
        load_prompt(EXTRACT_PROMPT),
        schema=schema,
        summary=_indent_all(summary.strip()) or "(none: this is the start of the conversation)",
        kinds=_render_kinds(kinds, user_scope=user_scope),
        memories="\n".join(_render_memory(m) for m in memories) or "(none)",
        earlier=_render_messages(earlier, marker=" (earlier)"),
        messages=_render_messages(messages),
    )


def summary_messages(
    *, summary: str, messages: list[PromptMessage], schema: dict[str, Any] | None
) -> list[dict[str, str]]:
    """The chat messages of a rolling-summary request (see `extraction_messages`)."""
    return _chat(
        load_prompt(SUMMARIZE_PROMPT),
        schema=schema,
        summary=_indent_all(summary.strip()) or "(none yet)",
        messages=_render_messages(messages),
    )


def _chat(prompt: Prompt, *, schema: dict[str, Any] | None, **values: str) -> list[dict[str, str]]:
    system = prompt.system
    if schema is not None:
        system += "\n\n" + prompt.schema.substitute(schema=json.dumps(schema, indent=1))
    # The static instructions lead and the thread follows, so that servers which cache prompt
    # prefixes (OpenAI, vLLM) reuse the system message across threads.
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": prompt.user.substitute(**values)},
    ]


def _render_messages(messages: Sequence[PromptMessage], *, marker: str = "") -> str:
    lines: list[str] = []
    day = None
    for message in messages:
        if message.created_at is not None:
            moment = message.created_at
            if moment.tzinfo is not None:
                moment = moment.astimezone(UTC)
            if moment.date() != day:
                day = moment.date()
                lines.append(f"--- {day.isoformat()} ({day.strftime('%A')}) ---")
        name = _one_line(message.name or "")
        speaker = f"{message.role} ({name})" if name else message.role
        lines.append(f"[{message.seq}]{marker} {speaker}: {_indent_rest(message.content)}")
    return "\n".join(lines) or "(none)"


def _render_memory(memory: PromptMemory) -> str:
    marker = " (read-only)" if memory.read_only else " (user)" if memory.user else ""
    head = f"({memory.memory_id} v{memory.version} {memory.category}){marker}"
    line = f"{head} {_indent_rest(memory.text)}"
    key = _one_line(memory.key or "")
    if key:
        line += f" [key: {key}]"
    kind = _one_line(memory.kind)
    if kind and kind != "fact":
        line += f" [kind: {kind}]"
    if memory.data:
        data = _json(memory.data)
        shown = data if len(data) <= MEMORY_DATA_CHARS else f"{len(data)} characters, not shown"
        line += f" [data: {shown}]"
    return line


def _render_kinds(kinds: Sequence[PromptKind], *, user_scope: bool) -> str:
    """One line per kind (name, cardinality, description, schema), at most `KINDS_MAX_CHARS` in
    all (the rest counted), then whether a user-scoped `add` is honoured here."""
    lines: list[str] = []
    size = 0
    for index, kind in enumerate(kinds):
        description = _cut(_one_line(kind.description), KIND_DESCRIPTION_CHARS)
        line = f"- {_one_line(kind.name)} ({'single' if kind.single else 'multiple'})"
        if description:
            line += f": {description}"
        if kind.schema is None:
            line += " No schema."
        else:
            schema = _json(kind.schema)
            if len(schema) <= KIND_SCHEMA_CHARS:
                line += f" Schema of data: {schema}"
            else:
                line += " Its schema is too long to show here: do not use this kind."
        if lines and size + len(line) > KINDS_MAX_CHARS:
            lines.append(f"- ({len(kinds) - index} more kinds not shown)")
            break
        lines.append(line)
        size += len(line) + 1
    lines = lines or ["- fact (multiple): One distilled fact (the default kind). No schema."]
    if user_scope:
        lines.append(
            'User scope: available ("scope": "user" for a fact that holds for every agent).'
        )
    else:
        lines.append('User scope: not available in this conversation (always "scope": "agent").')
    return "\n".join(lines)


def _json(value: Any) -> str:
    """Compact JSON, every non-ASCII character escaped: no line break of any kind in it."""
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "), sort_keys=True)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


INDENT = "    "


def _indent_rest(text: str) -> str:
    """`text` with every line after the first indented; every kind of line break becomes \\n."""
    return ("\n" + INDENT).join(text.strip("\n").splitlines())


def _indent_all(text: str) -> str:
    """`text` with every line indented (a block under its own heading)."""
    return "\n".join(INDENT + line for line in text.splitlines())


def _one_line(text: str) -> str:
    """A one-line field (a name, a key): its line breaks, of any kind, become spaces."""
    return " ".join(text.splitlines()).strip()

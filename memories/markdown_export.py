"""The Markdown export, shared by `GET /api/v1/export.md` and the console.

`export_markdown(...)` is a generator: it yields the header before it touches the queryset and
then walks the rows through a server-side cursor (`iterator(chunk_size=...)`), so an export of
any size streams in constant memory. Entries are grouped by category, then key.

Every memory's text is fenced with a backtick fence longer than any backtick run inside it, so
no memory (not even one holding a code fence or HTML) can break the document's structure.
Inline values (key, subject, thread) go into inline code spans sized the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime

from django.db.models import F, QuerySet

from memories.models import Memory
from memoryhub.pooling import stream_rows

CHUNK_SIZE = 500
# What an entry shows; everything else (the embedding above all) is never read.
ENTRY_FIELDS = (
    "id",
    "agent",
    "agent__slug",
    "key",
    "category",
    "kind",
    "scope",
    "text",
    "tags",
    "subject_id",
    "thread_id",
    "occurred_at",
    "created_at",
    "updated_at",
    "last_confirmed_at",
    "expires_at",
    "confidence",
    "version",
    "status",
)
_BACKTICKS = re.compile(r"`+")


def longest_backtick_run(text: str) -> int:
    return max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)


def fence_for(text: str) -> str:
    """A backtick fence no line of `text` can close: longer than its longest backtick run."""
    return "`" * max(3, longest_backtick_run(text) + 1)


def inline_code(value: str) -> str:
    """`value` as a one-line inline code span that its own backticks cannot end."""
    value = " ".join(str(value).split())  # no newlines: an inline value must stay on its line
    ticks = "`" * (longest_backtick_run(value) + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if value else "—"


def export_order(qs: QuerySet) -> QuerySet:
    """Grouped by category, then key (keyless entries after keyed ones), oldest first within."""
    return qs.order_by("category", F("key").asc(nulls_last=True), "created_at", "id")


def export_filename(tenant_slug: str, agent_slug: str, when: datetime) -> str:
    return f"{tenant_slug}-{agent_slug}-{when.strftime('%Y-%m-%d')}.md"


def render_entry(memory: Memory, source: str) -> str:
    title = inline_code(memory.key) if memory.key else "(no key)"
    lines = [
        f"### {title}",
        "",
        f"- id: `{memory.pk}`",
        f"- key: {inline_code(memory.key) if memory.key else '—'}",
        f"- kind: {inline_code(memory.kind)}",
        f"- tags: {', '.join(inline_code(t) for t in memory.tags) if memory.tags else '—'}",
    ]
    if memory.subject_id:
        lines.append(f"- subject: {inline_code(memory.subject_id)}")
    if memory.scope == "user":
        lines.append("- scope: user (the subject's, for every agent)")
    if memory.thread_id:
        lines.append(f"- thread: {inline_code(memory.thread_id)}")
    if memory.occurred_at:
        lines.append(f"- occurred: {_when(memory.occurred_at)}")
    lines += [
        f"- created: {_when(memory.created_at)}",
        f"- updated: {_when(memory.updated_at)}",
        f"- last confirmed: {_when(memory.last_confirmed_at)}",
        f"- expires: {_when(memory.expires_at) if memory.expires_at else 'never'}",
        f"- confidence: {memory.confidence:g}",
        f"- source: {inline_code(source)}",
        f"- version: {memory.version}",
    ]
    if memory.status != "active":
        lines.append(f"- status: {memory.status}")
    fence = fence_for(memory.text)
    lines += ["", f"{fence}text", memory.text, fence, "", ""]
    return "\n".join(lines)


def export_markdown(
    memories: QuerySet,
    *,
    title: str,
    source_for: Callable[[Memory], str],
    generated_at: datetime,
    filters: dict[str, str] | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[str]:
    """Yield the export document piece by piece (header first, then one entry at a time)."""
    header = [f"# {title}", "", f"Exported {_when(generated_at)}."]
    shown = {k: v for k, v in (filters or {}).items() if v}
    if shown:
        header.append(
            "Filters: " + ", ".join(f"{k} = {inline_code(v)}" for k, v in shown.items()) + "."
        )
    yield "\n".join(header) + "\n\n"
    category = None
    count = 0
    rows: Iterable[Memory] = stream_rows(
        export_order(memories).select_related("agent").only(*ENTRY_FIELDS), chunk_size
    )
    for memory in rows:
        if memory.category != category:
            category = memory.category
            yield f"## {category}\n\n"
        count += 1
        yield render_entry(memory, source_for(memory))
    yield f"---\n\n{count} {'memory' if count == 1 else 'memories'}.\n"

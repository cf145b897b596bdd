"""What one extraction run shows the model: the messages after the watermark, the
rolling summary, the agent's most related live memories, the messages just before the watermark
as read-only context, and the tenant's kinds."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Func, IntegerField, Sum
from django.db.models.functions import Length, Right

from accounts.models import Tenant
from memories import kind_registry
from memories.embeddings import get_embedder
from memories.formation.llm import MAX_SUMMARY_CHARS, PromptKind, PromptMemory, PromptMessage
from memories.models import Memory, Message, Scope, Thread
from memories.retrieval.params import MAX_QUERY_CHARS
from memories.retrieval.ranking import ranked_ids
from memories.visibility import formation_changeable, formation_shown_q

RELATED_LIMIT = 12
WINDOW_PAGE = 100
# The earlier messages' content, in all: as much as the rolling summary may hold, so that a
# huge earlier message cannot blow the prompt. A message cut to fit keeps its end (the part
# nearest the new messages), unless less than `EARLIER_MIN_CUT` of it would be left.
EARLIER_MAX_CHARS = MAX_SUMMARY_CHARS
EARLIER_MIN_CUT = 200


def _prompt_messages(rows) -> list[PromptMessage]:
    return [
        PromptMessage(
            seq=m.seq, role=m.role, content=m.content, name=m.name, created_at=m.created_at
        )
        for m in rows
    ]


def message_window(thread: Thread) -> list[PromptMessage]:
    """The messages after the watermark, oldest first, as many as fit the agent's summary
    threshold (at least one): a long backlog is extracted window by window, read a page at a
    time (plain LIMIT queries: a server-side cursor costs three round trips)."""
    limit = thread.agent.summary_threshold_bytes
    rows: list[Message] = []
    size, after = 0, thread.extracted_seq
    while True:
        page = list(
            Message.objects.for_tenant(thread.tenant_id)
            .filter(thread=thread, seq__gt=after)
            .order_by("seq")[:WINDOW_PAGE]
        )
        for message in page:
            size += len(message.content.encode())
            if rows and size > limit:
                return _prompt_messages(rows)
            rows.append(message)
        if len(page) < WINDOW_PAGE:
            return _prompt_messages(rows)
        after = page[-1].seq


def earlier_messages(thread: Thread, *, before_seq: int) -> list[PromptMessage]:
    """The messages before `before_seq` (the run's first new message), oldest first, shown to
    the model as read-only context: at most the agent's `context_messages` (0: none)
    and `EARLIER_MAX_CHARS` characters, the newest kept first. The oldest one that does not fit
    whole is cut at its start ("…"), and none before it is shown. PostgreSQL sends at most
    `EARLIER_MAX_CHARS` characters of each."""
    count = thread.agent.context_messages
    if count <= 0 or before_seq <= 1:
        return []
    rows = (
        Message.objects.for_tenant(thread.tenant_id)
        .filter(thread=thread, seq__lt=before_seq)
        .order_by("-seq")
        .annotate(tail=Right("content", EARLIER_MAX_CHARS), length=Length("content"))
        .values_list("seq", "role", "name", "created_at", "tail", "length")[:count]
    )
    kept: list[PromptMessage] = []
    left = EARLIER_MAX_CHARS
    for seq, role, name, created_at, tail, length in rows:
        content = tail
        if length > left:
            if left < EARLIER_MIN_CUT:
                break
            content = "…" + tail[len(tail) - left + 1 :]
        kept.append(
            PromptMessage(seq=seq, role=role, content=content, name=name, created_at=created_at)
        )
        left -= len(content)
        if length > len(content):
            break
    kept.reverse()
    return kept


def prompt_kinds(tenant: Tenant) -> list[PromptKind]:
    """The tenant's kinds as the prompt lists them: the built-in ones first, in
    their order, then the tenant's own by name (`prompts` bounds how many fit)."""
    builtin = {kind["name"]: i for i, kind in enumerate(kind_registry.BUILTIN_KINDS)}
    ordered = sorted(
        kind_registry.registry(tenant).kinds,
        key=lambda kind: (builtin.get(kind.name, len(builtin)), kind.name),
    )
    return [
        PromptKind(
            name=kind.name, single=kind.single, description=kind.description, schema=kind.schema
        )
        for kind in ordered
    ]


def unsummarised(thread: Thread) -> list[PromptMessage]:
    """Extracted messages not yet folded into the summary."""
    return _prompt_messages(_unsummarised_rows(thread).order_by("seq"))


def unsummarised_bytes(thread: Thread) -> int:
    """The size of `unsummarised(thread)`, counted by PostgreSQL (UTF-8 bytes)."""
    total = _unsummarised_rows(thread).aggregate(
        n=Sum(Func("content", function="octet_length", output_field=IntegerField()))
    )
    return total["n"] or 0


def _unsummarised_rows(thread: Thread):
    return Message.objects.for_tenant(thread.tenant_id).filter(
        thread=thread, seq__gt=thread.summarized_seq, seq__lte=thread.extracted_seq
    )


def related_memories(
    *, thread: Thread, messages: list[PromptMessage], now: datetime | None = None
) -> list[PromptMemory]:
    """The live memories the hybrid search ranks highest against the new messages, among those
    formation may show for the thread (`visibility.formation_shown_q`): the ones the model may
    update, forget or confirm (`visibility.formation_q`: the subject's user memories among
    them, marked as such), and the others marked read-only.
    Live at the run's `now` (its injected clock). Read without touching `last_accessed_at`
    (extraction is not an agent's read)."""
    query = "\n".join(m.content for m in messages if m.role == "user") or "\n".join(
        m.content for m in messages
    )
    query = query[-MAX_QUERY_CHARS:]
    agent, subject_id = thread.agent, thread.subject_id
    scope = (
        Memory.objects.for_tenant(thread.tenant)
        .live(now)
        .filter(formation_shown_q(agent=agent, subject_id=subject_id))
    )
    embedder = get_embedder()
    vector = embedder.embed([query])[0]
    ids = [
        memory_id
        for memory_id, _ in ranked_ids(
            scope,
            query=query,
            vector=vector,
            mode="hybrid",
            limit=RELATED_LIMIT,
            model=embedder.model_name,
        )
    ]
    operable = formation_changeable(agent=agent, subject_id=subject_id)
    rows = {
        row[0]: row
        for row in Memory.objects.for_tenant(thread.tenant_id)
        .filter(id__in=ids)
        .annotate(operable=operable)
        .values_list(
            "id", "key", "version", "category", "text", "operable", "scope", "kind", "data"
        )
    }
    return [
        PromptMemory(
            memory_id=m[0],
            key=m[1],
            version=m[2],
            category=m[3],
            text=m[4],
            read_only=not m[5],
            user=m[6] == Scope.USER,
            kind=m[7],
            data=m[8],
        )
        for m in (rows[i] for i in ids if i in rows)
    ]

"""What one extraction run shows the model (SPEC §11): the messages after the watermark, the
rolling summary, and the agent's most related live memories."""

from __future__ import annotations

from django.db.models import Func, IntegerField, Sum

from memories.embeddings import get_embedder
from memories.formation.llm import PromptMemory, PromptMessage
from memories.models import Memory, Message, Thread
from memories.retrieval.params import MAX_QUERY_CHARS
from memories.retrieval.ranking import ranked_ids
from memories.visibility import formation_changeable, formation_shown_q

RELATED_LIMIT = 12
WINDOW_PAGE = 100


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
    rows, size, after = [], 0, thread.extracted_seq
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


def related_memories(*, thread: Thread, messages: list[PromptMessage]) -> list[PromptMemory]:
    """The live memories the hybrid search ranks highest against the new messages, among those
    formation may show for the thread (`visibility.formation_shown_q`): the ones the model may
    update, forget or confirm (`visibility.formation_q`), and the others marked read-only.
    Read without touching `last_accessed_at` (extraction is not an agent's read)."""
    query = "\n".join(m.content for m in messages if m.role == "user") or "\n".join(
        m.content for m in messages
    )
    query = query[-MAX_QUERY_CHARS:]
    agent, subject_id = thread.agent, thread.subject_id
    scope = (
        Memory.objects.for_tenant(thread.tenant)
        .live()
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
        .values_list("id", "key", "version", "category", "text", "operable")
    }
    return [
        PromptMemory(
            memory_id=m[0], key=m[1], version=m[2], category=m[3], text=m[4], read_only=not m[5]
        )
        for m in (rows[i] for i in ids if i in rows)
    ]

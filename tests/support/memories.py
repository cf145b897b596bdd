"""Memories stored and conversations handed over through the services, as an agent would
through the API (same service, same rules)."""

from __future__ import annotations

from accounts.principal import Principal
from memories import inputs
from memories.formation.ingest import thread_messages_add
from memories.models import Thread
from memories.services.store import memory_store
from memoryhub.errors import InvalidInput


def store(agent, text: str, **fields):
    """Store a memory as `agent` would through the API (same service, same rules)."""
    principal = Principal(
        tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write", "admin"})
    )
    data = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=data).memory


def ingest(agent, *contents: str, thread_id: str = "t-1", subject_id: str | None = None, **extra):
    """Hand `agent`'s conversation to MemoryHub as the API would (user and assistant taking
    turns); returns the thread. Nothing is extracted unless `extract` says so."""
    principal = Principal(tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write"}))
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": content}
        for i, content in enumerate(contents)
    ]
    data = {"messages": messages, "extract": "off", **extra}
    if subject_id is not None:
        data["subject_id"] = subject_id
    result = thread_messages_add(principal=principal, thread_id=thread_id, data=data)
    return Thread.objects.get(pk=result.thread.pk)


def spy_on_fields_check(monkeypatch) -> list[tuple[dict, str | None]]:
    """Record every call of `inputs.memory_fields_check` (the rules between a memory's fields)
    with what it raised (None when the memory passed); the rule still runs."""
    calls: list[tuple[dict, str | None]] = []
    real = inputs.memory_fields_check

    def spy(**kwargs):
        try:
            real(**kwargs)
        except InvalidInput as exc:
            calls.append((kwargs, exc.message))
            raise
        calls.append((kwargs, None))

    monkeypatch.setattr(inputs, "memory_fields_check", spy)
    return calls

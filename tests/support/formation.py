"""Extraction runs made by hand: a conversation ingested, the model's operations written out,
a run requested and executed; and the formation fixtures (the thread's agent as a principal, a
model client on the scripted stand-in, `fake_llm`, whose retry waits are recorded instead of
slept)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.principal import Principal
from memories.formation.ingest import thread_messages_add
from memories.formation.llm import LLMClient
from memories.formation.runs import run_execute, run_request
from memories.models import ExtractionRun, Thread


@pytest.fixture
def principal(agent):
    return Principal(tenant=agent.tenant, agent=agent)


@pytest.fixture
def llm(fake_llm):
    return LLMClient(url=fake_llm.url, model="stand-in", timeout=5, sleep=fake_llm.sleeps.append)


NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"


def ingest(principal, *contents, thread_id="t-1", now=NOW, **extra):
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": c}
        for i, c in enumerate(contents)
    ]
    return thread_messages_add(
        principal=principal,
        thread_id=thread_id,
        data={"messages": messages, "extract": "off", **extra},
        now=now,
    )


def add_op(text, *, evidence=(1,), confidence=0.9, category="core", key=None, **extra):
    return {
        "op": "add",
        "text": text,
        "key": key,
        "category": category,
        "kind": "fact",
        "tags": [],
        "confidence": confidence,
        "mentions": [],
        "occurred_at": None,
        "evidence": list(evidence),
        **extra,
    }


def update_op(memory_id, text, *, version=1, evidence=(1,), confidence=0.9):
    return {
        "op": "update",
        "memory_id": memory_id,
        "version": version,
        "text": text,
        "confidence": confidence,
        "evidence": list(evidence),
    }


def extract(principal, llm, *, thread_id="t-1", now=NOW) -> ExtractionRun:
    thread = Thread.objects.get(thread_id=thread_id, agent=principal.agent)
    run = run_request(thread=thread, trigger="now", now=now)
    return run_execute(run.pk, llm=llm, now=now)

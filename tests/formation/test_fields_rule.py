"""A formed `add` meets the rules between a memory's fields through the one function every
write asks (`inputs.memory_fields_check`): a user-scoped conversation memory is refused, an
`invalid` operation of the run, and nothing is stored."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.principal import Principal
from memories.formation.ingest import thread_messages_add
from memories.formation.runs import run_execute, run_request
from memories.models import Memory, Thread
from memories.services.policies import agent_policy_set
from tests.support.memories import spy_on_fields_check

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_a_formed_add_is_checked_by_the_rule_function(agent, fake_llm, llm, monkeypatch):
    agent_policy_set(
        tenant=agent.tenant, agent=agent, extraction_categories=["core", "conversation"]
    )
    calls = spy_on_fields_check(monkeypatch)
    alice = Principal(tenant=agent.tenant, agent=agent, bound_subject="alice")
    thread_messages_add(
        principal=alice,
        thread_id="t-1",
        data={"messages": [{"role": "user", "content": "I am flying to Oslo"}], "extract": "off"},
        now=NOW,
    )
    add = {
        "op": "add",
        "key": None,
        "kind": "fact",
        "tags": [],
        "confidence": 0.9,
        "mentions": [],
        "occurred_at": None,
        "evidence": [1],
    }
    fake_llm.queue_json(
        {
            "operations": [
                {**add, "text": "Alice flies to Oslo", "category": "conversation", "scope": "user"},
                {**add, "text": "Alice is travelling", "category": "conversation"},
            ]
        }
    )
    thread = Thread.objects.get(thread_id="t-1", agent=agent)
    run = run_execute(run_request(thread=thread, trigger="now", now=NOW).pk, llm=llm, now=NOW)

    refused = [(c, m) for c, m in calls if m is not None]
    assert refused == [
        (
            {
                "category": "conversation",
                "thread_id": "t-1",
                "scope": "user",
                "subject_id": "alice",
            },
            "A user-scoped memory cannot be a conversation memory",
        )
    ]
    assert {name: n for name, n in run.counts.items() if n} == {"added": 1, "invalid": 1}
    assert list(Memory.objects.values_list("text", "scope", "thread_id")) == [
        ("Alice is travelling", "agent", "t-1")
    ]

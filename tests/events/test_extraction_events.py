"""Extraction runs write `extraction.completed` / `extraction.failed` (docs/operations.md#events),
and count in the metrics."""

from __future__ import annotations

import pytest

from memories.events import feed
from memories.models import Event
from memoryhub import metrics
from tests.support.formation import add_op, extract, ingest


@pytest.mark.django_db
def test_a_run_that_forms_a_memory_and_one_that_fails_write_their_events(
    principal, fake_llm, llm, settings, key_client, agent
):
    settings.MEMORYHUB_METRICS_TOKEN = "on"
    done_before = metrics.EXTRACTION_RUNS.labels("done")._value.get()
    tokens_before = metrics.EXTRACTION_TOKENS.labels("prompt")._value.get()
    ingest(principal, "I am vegetarian", subject_id="cust-1")
    fake_llm.queue_json({"operations": [add_op("The user is vegetarian")]}, usage=(800, 40))
    run = extract(principal, llm)
    ingest(principal, "more", subject_id="cust-1")
    fake_llm.queue_content("this is not JSON")
    failed = extract(principal, llm)

    feed.sequence()
    runs = list(Event.objects.filter(type__startswith="extraction.").order_by("position"))
    assert [(e.type, e.data["run_id"]) for e in runs] == [
        ("extraction.completed", run.pk),
        ("extraction.failed", failed.pk),
    ]
    completed = runs[0]
    assert (completed.agent_id, completed.subject_id, completed.category) == (
        agent.pk,
        "cust-1",
        "conversation",
    )
    assert completed.data["counts"]["added"] == 1 and completed.data["prompt_tokens"] == 800
    assert runs[1].data["error_class"] == "LLMMalformedOutput"
    assert "not JSON" not in str(runs[1].data)  # the error's message is left out
    created = Event.objects.get(type="memory.created")
    assert created.position < completed.position  # the run's memories, then its end

    # The agent reads its runs in its feed (for the subject); the metrics counted them.
    types = [
        e["type"]
        for e in key_client(agent, subject_id="cust-1").get("/api/v1/events").json()["events"]
    ]
    assert types == ["memory.created", "extraction.completed", "extraction.failed"]
    assert metrics.EXTRACTION_RUNS.labels("done")._value.get() == done_before + 1
    assert metrics.EXTRACTION_TOKENS.labels("prompt")._value.get() >= tokens_before + 800

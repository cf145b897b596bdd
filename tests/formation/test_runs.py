"""Extraction runs end to end (docs/formation.md): the real `openai` client over HTTP against the
scripted stand-in, real PostgreSQL, operations applied through the ordinary services."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import pytest

from memories.formation.ingest import thread_messages_add
from memories.formation.llm import LLMClient
from memories.formation.runs import extract_due_threads, run_execute, run_request
from memories.models import ExtractionRun, Memory, MemoryRevision, Message, RunState, Thread
from memories.services.lifecycle import memory_forget
from memories.services.operator_actions import memory_tombstone
from memories.services.store import memory_store
from tests.support.commands import start_command
from tests.support.formation import NOW, TOKEN, add_op, extract, ingest, update_op


@pytest.mark.django_db
def test_the_request_holds_the_summary_only_new_messages_and_related_memories_and_no_secret(
    principal, fake_llm, llm
):
    memory_store(principal=principal, data={"text": "The user lives in Lisbon"}, now=NOW)
    ingest(principal, "I moved to Lisbon last year", "Nice!")
    extract(principal, llm)
    Thread.objects.update(summary="Earlier: the user talked about moving.")
    ingest(principal, f"Lisbon is lovely, my token is {TOKEN}", "Glad to hear")
    fake_llm.queue_json({"operations": []})
    extract(principal, llm)
    prompt = fake_llm.last_request.prompt
    assert "Earlier: the user talked about moving." in prompt
    assert "[3] user: Lisbon is lovely, my token is [redacted:github_token]" in prompt
    assert "[4] assistant: Glad to hear" in prompt
    # Extracted by the first run: shown again only as earlier context.
    assert "[1] (earlier) user: I moved to Lisbon last year" in prompt
    assert "[1] user: I moved" not in prompt
    memory = Memory.objects.get()
    assert f"({memory.pk} v1 core) The user lives in Lisbon" in prompt
    assert TOKEN not in str([r.body for r in fake_llm.requests])


@pytest.mark.django_db
def test_add_forms_an_inferred_memory_with_evidence_by_system_extract(principal, fake_llm, llm):
    ingest(principal, "I am vegetarian", "Noted", "and I hate cilantro")
    fake_llm.queue_json(
        {"operations": [add_op("The user is vegetarian", evidence=[1, 99], confidence=0.95)]},
        usage=(800, 40),
    )
    run = extract(principal, llm)
    assert run.state == RunState.DONE
    assert (run.prompt_tokens, run.completion_tokens, run.from_seq, run.to_seq) == (800, 40, 1, 3)
    assert run.counts["added"] == 1
    memory = Memory.objects.get()
    assert memory.text == "The user is vegetarian"
    assert memory.capture_mode == "inferred"
    assert memory.source_provider == "extraction:stand-in"
    assert memory.review_state == "none"  # 0.95 is above review_below (0.8)
    assert memory.evidence == {"thread_id": "t-1", "messages": [1], "run_id": run.pk}
    assert memory.thread_id == "t-1"
    assert MemoryRevision.objects.get(memory=memory).actor == "system:extract"
    thread = Thread.objects.get()
    assert (thread.extracted_seq, thread.memories_added, thread.extraction_due_at) == (3, 1, None)


@pytest.mark.django_db
def test_an_added_memory_takes_occurred_at_from_the_model_or_else_its_evidence(
    principal, fake_llm, llm
):
    ingest(principal, "We hiked Sintra in March", "Lovely", "I start at Globex tomorrow")
    Message.objects.filter(seq=3).update(created_at=NOW - timedelta(days=2))
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user hiked Sintra", occurred_at="2026-03-16", evidence=[1]),
                add_op("The user starts at Globex", evidence=[3]),
                add_op("The user has plans", occurred_at="someday", evidence=[9]),
            ]
        }
    )
    extract(principal, llm)
    when = dict(Memory.objects.values_list("text", "occurred_at"))
    assert when["The user hiked Sintra"] == datetime(2026, 3, 16, tzinfo=UTC)
    assert when["The user starts at Globex"] == NOW - timedelta(days=2)
    assert when["The user has plans"] is None  # unreadable, and no evidence this run showed


@pytest.mark.django_db
def test_update_forget_and_confirm_go_through_compare_and_set(principal, fake_llm, llm):
    a = memory_store(principal=principal, data={"text": "Works at Acme"}, now=NOW).memory
    b = memory_store(principal=principal, data={"text": "Has a cat"}, now=NOW).memory
    c = memory_store(principal=principal, data={"text": "Likes jazz"}, now=NOW).memory
    ingest(principal, "I left Acme, now at Globex", "and the cat went to my sister", "jazz!")
    fake_llm.queue_json(
        {
            "operations": [
                update_op(a.pk, "Works at Globex"),
                {
                    "op": "forget",
                    "memory_id": b.pk,
                    "version": 1,
                    "reason": "the cat moved out",
                    "evidence": [2],
                },
                {"op": "confirm", "memory_id": c.pk, "evidence": [3]},
            ]
        }
    )
    run = extract(principal, llm)
    assert {k: v for k, v in run.counts.items() if v} == {
        "updated": 1,
        "forgotten": 1,
        "confirmed": 1,
    }
    a.refresh_from_db(), b.refresh_from_db(), c.refresh_from_db()
    assert (a.text, a.version, a.evidence["messages"]) == ("Works at Globex", 2, [1])
    assert (b.status, b.tombstone_reason, b.tombstoned_by) == (
        "tombstoned",
        "the cat moved out",
        "system:extract",
    )
    assert c.version == 2
    actors = set(MemoryRevision.objects.filter(version=2).values_list("actor", flat=True))
    assert actors == {"system:extract"}
    assert Thread.objects.get().memories_updated == 1


@pytest.mark.django_db
def test_a_memory_changed_after_the_model_saw_it_is_a_conflict_and_left_alone(
    principal, fake_llm, llm
):
    memory = memory_store(principal=principal, data={"text": "Works at Acme"}, now=NOW).memory
    ingest(principal, "I work at Globex now")
    memory_store(principal=principal, data={"text": "x"}, now=NOW)  # unrelated
    from memories.services.changes import memory_update

    memory_update(principal=principal, memory_id=memory.pk, data={"text": "Works at Initech"})
    fake_llm.queue_json(
        {
            "operations": [
                update_op(memory.pk, "Works at Globex"),
                {
                    "op": "forget",
                    "memory_id": memory.pk,
                    "version": 1,
                    "reason": "changed",
                    "evidence": [1],
                },
            ]
        }
    )
    run = extract(principal, llm)
    assert run.counts["conflict"] == 2
    memory.refresh_from_db()
    assert (memory.text, memory.version, memory.status) == ("Works at Initech", 2, "active")


@pytest.mark.django_db
def test_a_fact_an_operator_tombstoned_is_not_learnt_again(principal, fake_llm, llm, tenant):
    memory = memory_store(principal=principal, data={"text": "The user is called Bob"}).memory
    memory_tombstone(tenant=tenant, memory_id=memory.pk, actor="operator:a@b.c", reason="wrong")
    ingest(principal, "call me Bob")
    fake_llm.queue_json({"operations": [add_op("The user is called Bob")]})
    run = extract(principal, llm)
    assert run.counts["blocked_by_correction"] == 1
    assert Memory.objects.filter(status="active").count() == 0


@pytest.mark.django_db
def test_secrets_low_confidence_and_review_thresholds(principal, fake_llm, llm):
    ingest(principal, "facts follow")
    fake_llm.queue_json(
        {
            "operations": [
                add_op(f"The user's GitHub token is {TOKEN}"),
                add_op("The user maybe likes golf", confidence=0.3),
                add_op("The user probably lives in Porto", confidence=0.6),
                add_op("The user speaks Portuguese", confidence=0.95),
                add_op("Today the user is tired", category="archival"),
            ]
        }
    )
    run = extract(principal, llm)
    counts = {k: v for k, v in run.counts.items() if v}
    assert counts == {
        "secret_dropped": 1,
        "low_confidence": 1,
        "added": 2,
        "pending_review": 1,
        "category_not_allowed": 1,
    }
    states = {
        text: (state, reason)
        for text, state, reason in Memory.objects.values_list(
            "text", "review_state", "review_reason"
        )
    }
    assert states == {
        "The user probably lives in Porto": ("pending", "low_confidence"),
        "The user speaks Portuguese": ("none", ""),
    }
    assert TOKEN not in str(list(Memory.objects.values())) + str(
        list(ExtractionRun.objects.values())
    )


@pytest.mark.django_db
def test_review_policy_puts_every_extracted_memory_in_the_queue(principal, agent, fake_llm, llm):
    agent.extraction = "review"
    agent.save()
    ingest(principal, "I like tea")
    fake_llm.queue_json({"operations": [add_op("The user likes tea", confidence=0.99)]})
    extract(principal, llm)
    memory = Memory.objects.get()
    assert (memory.review_state, memory.review_reason) == ("pending", "agent_policy")


@pytest.mark.django_db
def test_a_near_duplicate_add_confirms_the_existing_memory(principal, fake_llm, llm):
    memory = memory_store(principal=principal, data={"text": "The user likes tea"}).memory
    ingest(principal, "tea please")
    fake_llm.queue_json({"operations": [add_op("The user likes tea")]})
    run = extract(principal, llm)
    assert run.counts["duplicate"] == 1
    memory.refresh_from_db()
    assert (Memory.objects.count(), memory.version) == (1, 2)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "reply",
    [
        "this is not JSON",
        '{"operations": [{"op": "teleport"}]}',
        '{"operations": [{"op": "add", "text": 5}]}',
    ],
)
def test_malformed_output_fails_the_run_and_applies_nothing(principal, fake_llm, llm, reply):
    ingest(principal, "hello")
    fake_llm.queue_content(reply)
    run = extract(principal, llm)
    assert run.state == RunState.FAILED
    assert run.error_class == "LLMMalformedOutput"
    assert not Memory.objects.exists()
    thread = Thread.objects.get()
    assert (thread.extracted_seq, thread.pending_messages) == (0, 1)


@pytest.mark.django_db
def test_429_and_5xx_are_retried_then_the_run_fails_with_the_error(principal, fake_llm, llm):
    ingest(principal, "hello")
    fake_llm.queue_error(429, headers={"Retry-After": "2"})
    fake_llm.queue_error(503)
    fake_llm.queue_error(500)
    run = extract(principal, llm)
    assert len(fake_llm.requests) == 3
    assert fake_llm.sleeps[0] == 2.0
    assert (run.state, run.error_class) == (RunState.FAILED, "LLMUnavailable")
    assert "500" in run.error_message


@pytest.mark.django_db
def test_a_timeout_then_success_is_retried(principal, fake_llm):
    # The first request never answers: the timeout ends it, and the retry's answer has a
    # second (a generous bound on a busy machine) to come back.
    llm = LLMClient(url=fake_llm.url, model="m", timeout=1.0, sleep=fake_llm.sleeps.append)
    ingest(principal, "hello")
    fake_llm.queue_hang()
    fake_llm.queue_json({"operations": [add_op("The user said hello", evidence=[1])]})
    run = extract(principal, llm)
    assert run.state == RunState.DONE
    assert Memory.objects.count() == 1
    assert len(fake_llm.requests) == 2  # the one that timed out, and its retry


@pytest.mark.django_db
def test_two_triggers_at_once_give_one_run(principal, fake_llm):
    ingest(principal, "hello")
    thread = Thread.objects.get()
    first = run_request(thread=thread, trigger="now", now=NOW)
    second = run_request(thread=thread, trigger="extract", now=NOW)
    assert first.pk == second.pk
    assert ExtractionRun.objects.count() == 1


@pytest.mark.django_db
def test_resending_a_conversation_extracts_only_the_new_messages(principal, fake_llm, llm):
    history = [
        {"role": "user", "content": "alpha", "created_at": "2026-05-01T11:00:00Z"},
        {"role": "assistant", "content": "bravo", "created_at": "2026-05-01T11:00:01Z"},
    ]
    data = {"messages": history, "extract": "off"}
    thread_messages_add(principal=principal, thread_id="t-1", data=data, now=NOW)
    extract(principal, llm)
    history.append({"role": "user", "content": "charlie", "created_at": "2026-05-01T11:00:02Z"})
    result = thread_messages_add(principal=principal, thread_id="t-1", data=data, now=NOW)
    assert (result.accepted, result.duplicates) == (1, 2)
    extract(principal, llm)
    prompt = fake_llm.last_request.prompt
    assert "[3] user: charlie" in prompt
    new = prompt.split("## New messages\n", 1)[1]
    assert "alpha" not in new and "bravo" not in new
    assert "[1] (earlier) user: alpha" in prompt and "[2] (earlier) assistant: bravo" in prompt


@pytest.mark.django_db
def test_the_rolling_summary_starts_at_the_threshold_and_the_next_run_gets_it(
    principal, agent, fake_llm, llm
):
    agent.summary_threshold_bytes = 1000
    agent.save()
    ingest(principal, "a" * 400, "b" * 400)
    extract(principal, llm)  # 800 bytes extracted: under the threshold, no summary
    assert len(fake_llm.requests) == 1
    ingest(principal, "c" * 400)
    fake_llm.queue_json({"operations": []})
    fake_llm.queue_json({"summary": "The user typed many letters."})
    extract(principal, llm)
    thread = Thread.objects.get()
    assert (thread.summary, thread.summarized_seq) == ("The user typed many letters.", 3)
    assert fake_llm.requests[-1].response_format["json_schema"]["name"] == "thread_summary"
    ingest(principal, "d")
    extract(principal, llm)
    assert "The user typed many letters." in fake_llm.last_request.prompt
    new = fake_llm.last_request.prompt.split("## New messages\n", 1)[1]
    assert "cccc" not in new and "[4] user: d" in new


@pytest.mark.django_db
def test_a_long_backlog_is_extracted_window_by_window(principal, agent, fake_llm, llm):
    agent.summary_threshold_bytes = 1000
    agent.save()
    ingest(principal, *["x" * 600] * 3)
    run = extract(principal, llm)
    assert (run.from_seq, run.to_seq) == (1, 1)
    thread = Thread.objects.get()
    assert thread.extraction_due_at == NOW  # the rest is due at once


@pytest.mark.django_db
def test_over_the_daily_token_budget_runs_are_deferred(principal, tenant, fake_llm, llm):
    tenant.extraction_daily_token_budget = 1000
    tenant.save()
    ingest(principal, "one")
    fake_llm.queue_json({"operations": []}, usage=(900, 200))
    assert extract(principal, llm).state == RunState.DONE
    ingest(principal, "two")
    run = extract(principal, llm)
    assert run.state == RunState.DEFERRED
    assert len(fake_llm.requests) == 1
    assert Thread.objects.get().extraction_due_at == datetime(2026, 5, 2, tzinfo=UTC)


@pytest.mark.django_db
def test_the_schedule_picks_idle_threads_only(principal, fake_llm):
    thread_messages_add(
        principal=principal,
        thread_id="idle",
        data={"messages": [{"role": "user", "content": "a"}]},
        now=NOW,
    )
    thread_messages_add(
        principal=principal,
        thread_id="busy",
        data={"messages": [{"role": "user", "content": "b"}]},
        now=NOW + timedelta(seconds=100),
    )
    assert extract_due_threads(now=NOW + timedelta(seconds=150)) == 1
    assert list(ExtractionRun.objects.values_list("thread__thread_id", flat=True)) == ["idle"]


@pytest.mark.django_db
def test_without_an_llm_the_schedule_does_nothing(principal, settings):
    settings.MEMORYHUB_LLM_URL = ""
    ingest(principal, "a")
    Thread.objects.update(extraction_due_at=NOW)
    assert extract_due_threads(now=NOW) == 0
    assert not ExtractionRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_between_the_answer_and_the_apply_is_retried_exactly_once(
    principal, fake_llm
):
    ingest(principal, "I am vegetarian", "and I live in Lisbon")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user is vegetarian", evidence=[1]),
                add_op("The user lives in Lisbon", evidence=[2]),
            ]
        }
    )
    thread = Thread.objects.get()
    # queued, as a worker finds it (run_request would run it here: the suite's cluster is sync)
    run = ExtractionRun.objects.create(
        tenant=thread.tenant, thread=thread, agent=thread.agent, trigger="now"
    )
    worker = start_command(
        "extract_threads",
        "--run",
        str(run.pk),
        env={"MEMORYHUB_LLM_URL": fake_llm.url, "MEMORYHUB_LLM_MODEL": "stand-in"},
        entry=("-m", "tests.support.dies_before_apply"),
    )
    out, err = worker.communicate(timeout=120)
    assert worker.returncode == -signal.SIGKILL, (out, err)
    assert worker.returncode == -signal.SIGKILL
    run.refresh_from_db()
    assert (run.state, run.answer is not None) == (RunState.RUNNING, True)
    assert not Memory.objects.exists()  # the answer was kept; nothing applied

    # The schedule finds the dead worker's run (its liveness lock is gone) and queues it again;
    # the suite's sync cluster executes it at once, from the kept answer.
    assert extract_due_threads(now=NOW) == 1
    run.refresh_from_db()
    assert (run.state, run.attempts) == (RunState.DONE, 2)
    assert run_execute(run.pk, now=NOW) is None  # a further retry finds nothing to do
    assert sorted(Memory.objects.values_list("text", flat=True)) == [
        "The user is vegetarian",
        "The user lives in Lisbon",
    ]
    assert len(fake_llm.requests) == 1  # the model was asked once


@pytest.mark.django_db
def test_a_forgotten_memory_forget_by_extraction_needs_the_version(principal):
    memory = memory_store(principal=principal, data={"text": "x y z"}).memory
    from memoryhub.errors import Conflict

    with pytest.raises(Conflict):
        memory_forget(principal=principal, memory_id=memory.pk, expected_version=7)
    assert memory_forget(principal=principal, memory_id=memory.pk, expected_version=1)[0]


@pytest.mark.django_db
def test_pending_messages_that_no_longer_exist_end_the_run_without_looping(
    principal, fake_llm, llm
):
    ingest(principal, "one", "two")
    Message.objects.all().delete()
    run = extract(principal, llm)
    assert run.state == RunState.DONE
    thread = Thread.objects.get()
    assert (thread.extracted_seq, thread.extraction_due_at) == (2, None)
    assert ExtractionRun.objects.count() == 1
    assert fake_llm.requests == []

"""A model's answer is bounded and applied in bounded transactions
(docs/formation.md#the-operation-bound): at most the agent's `extraction_max_operations` operations,
batches that never hold the agent's cap lock for long and resume after a crash, runs that fail
instead of replaying forever, NULs dropped per operation, and an erasure during a run taken as the
expected outcome it is."""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time

import pytest
from django.db import connection

from accounts.principal import Principal
from memories.formation import apply
from memories.formation.runs import MAX_RUN_ATTEMPTS, extract_due_threads, run_execute
from memories.models import ExtractionRun, Memory, RunState, Thread
from memories.services.erasure import subject_erase
from memories.services.store import memory_store
from tests.support.formation import NOW, add_op, extract, ingest

WAIT = 60  # seconds: a bound for events that happen at once when all is well


def distinct_facts(count: int, seed: int = 0) -> list[str]:
    """`count` facts that share no word, so that none is a near duplicate of another."""
    rng = random.Random(seed)
    return [
        "The user " + " ".join(f"w{rng.getrandbits(48):x}" for _ in range(5)) for _ in range(count)
    ]


def queued_run(thread: Thread) -> ExtractionRun:
    """A run as a worker finds it (`run_request` would execute it at once where the suite's
    cluster is sync, in transactional tests)."""
    return ExtractionRun.objects.create(
        tenant=thread.tenant, thread=thread, agent=thread.agent, trigger="now"
    )


def formed() -> int:
    return Memory.objects.filter(created_by="system:extract").count()


def _blocked_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_a_10000_operation_answer_is_cut_to_the_bound_and_leaves_the_agent_writable(
    principal, agent, fake_llm, llm, monkeypatch
):
    """While the run applies, the agent's own store waits for one batch at most: it completes
    while the run is still applying (its first batch committed, the rest not yet). Before the
    bound and the batches, the run applied all 10,000 in one transaction holding the agent's
    cap lock, and the store waited for all of it."""
    ingest(principal, "Here are all my facts")
    fake_llm.queue_json({"operations": [add_op(text) for text in distinct_facts(10_000)]})
    run = queued_run(Thread.objects.get())

    first_add, store_pid, store_done = threading.Event(), {}, threading.Event()
    pid_known = threading.Event()
    seen: dict = {}
    real_write = apply.memory_store_write
    calls = itertools.count(1)

    def write_then_let_the_store_queue(*, prepared):
        result = real_write(prepared=prepared)
        call = next(calls)
        if call == 1:  # inside the run's first transaction, with the agent's cap lock held
            first_add.set()
            assert pid_known.wait(WAIT)
            deadline = time.monotonic() + WAIT
            while not (store_done.is_set() or _blocked_on_a_lock(store_pid["pid"])):
                assert time.monotonic() < deadline, "the concurrent store never started"
                time.sleep(0.01)
        if call == 200:  # the unbounded code would go on for minutes: give up here
            raise RuntimeError("the answer was not cut to the bound")
        return result

    monkeypatch.setattr(apply, "memory_store_write", write_then_let_the_store_queue)

    def execute():
        try:
            run_execute(run.pk, llm=llm, now=NOW)
        finally:
            connection.close()

    def concurrent_store():
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                store_pid["pid"] = cursor.fetchone()[0]
            pid_known.set()
            memory_store(principal=principal, data={"text": "The agent's own note on tides"})
            seen["formed"] = formed()
            seen["state"] = ExtractionRun.objects.get(pk=run.pk).state
        finally:
            connection.close()
            store_done.set()

    worker = threading.Thread(target=execute)
    worker.start()
    assert first_add.wait(WAIT)
    writer = threading.Thread(target=concurrent_store)
    writer.start()
    assert store_done.wait(WAIT)
    worker.join(WAIT * 2)
    writer.join(WAIT)
    assert not worker.is_alive()

    # The store finished between two of the run's batches.
    assert seen["state"] == RunState.RUNNING
    assert 0 < seen["formed"] < agent.extraction_max_operations
    run.refresh_from_db()
    assert run.state == RunState.DONE
    assert {k: v for k, v in run.counts.items() if v} == {"added": 50, "over_limit": 9950}
    assert len(run.answer["operations"]) == 50  # the excess is not even kept
    assert (formed(), run.applied_ops) == (50, 50)
    assert Memory.objects.filter(text="The agent's own note on tides").exists()


@pytest.mark.django_db
def test_the_bound_is_the_agents_policy(principal, agent, fake_llm, llm):
    agent.extraction_max_operations = 3
    agent.save()
    ingest(principal, "facts")
    fake_llm.queue_json({"operations": [add_op(text) for text in distinct_facts(5)]})
    run = extract(principal, llm)
    assert {k: v for k, v in run.counts.items() if v} == {"added": 3, "over_limit": 2}
    assert len(run.answer["operations"]) == 3


@pytest.mark.django_db
def test_a_run_killed_between_batches_resumes_after_the_last_one_committed(
    principal, fake_llm, llm, monkeypatch
):
    facts = distinct_facts(25)
    ingest(principal, "facts")
    fake_llm.queue_json({"operations": [add_op(text) for text in facts]})
    run = queued_run(Thread.objects.get())

    class WorkerDied(BaseException):
        pass

    real_apply_one = apply._apply_one
    calls = itertools.count(1)

    def dies_in_the_second_batch(*args, **kwargs):
        if next(calls) == apply.APPLY_BATCH + 5:
            raise WorkerDied
        return real_apply_one(*args, **kwargs)

    monkeypatch.setattr(apply, "_apply_one", dies_in_the_second_batch)
    with pytest.raises(WorkerDied):
        run_execute(run.pk, llm=llm, now=NOW)
    run.refresh_from_db()
    assert (run.state, run.applied_ops, run.counts["added"]) == (
        RunState.RUNNING,
        apply.APPLY_BATCH,
        apply.APPLY_BATCH,
    )
    assert formed() == apply.APPLY_BATCH
    assert Thread.objects.get().extracted_seq == 0  # the watermark waits for the whole answer
    monkeypatch.undo()

    run = run_execute(run.pk, llm=llm, now=NOW)  # taken over: the dead worker's lock is gone

    assert (run.state, run.applied_ops, run.attempts) == (RunState.DONE, 25, 2)
    assert run.counts["added"] == 25
    assert sorted(Memory.objects.values_list("text", flat=True)) == sorted(facts)
    assert len(fake_llm.requests) == 1
    assert Thread.objects.get().extracted_seq == 1


@pytest.mark.django_db
def test_a_run_abandoned_again_and_again_fails_instead_of_replaying(principal, fake_llm, llm):
    ingest(principal, "facts")
    fake_llm.queue_json({"operations": [add_op("The user likes tea")]})
    run = queued_run(Thread.objects.get())
    # As a worker killed at the task time limit leaves it: running, answer kept, no live lock.
    ExtractionRun.objects.filter(pk=run.pk).update(
        state=RunState.RUNNING,
        attempts=MAX_RUN_ATTEMPTS,
        answer={"operations": [add_op("The user likes tea")]},
    )
    assert extract_due_threads(now=NOW) == 0  # not re-queued
    run.refresh_from_db()
    assert (run.state, run.error_class) == (RunState.FAILED, "ExtractionAbandoned")
    assert run_execute(run.pk, llm=llm, now=NOW) is None
    assert formed() == 0

    # The same for a queued one the cluster delivers again.
    ExtractionRun.objects.filter(pk=run.pk).update(state=RunState.QUEUED, error_class="")
    assert run_execute(run.pk, llm=llm, now=NOW) is None
    assert ExtractionRun.objects.get(pk=run.pk).error_class == "ExtractionAbandoned"
    assert (formed(), len(fake_llm.requests)) == (0, 0)


@pytest.mark.django_db
def test_applying_stops_before_the_task_time_limit_and_the_run_fails(
    principal, settings, fake_llm, llm
):
    settings.Q_CLUSTER = {**settings.Q_CLUSTER, "timeout": 0}  # spent before applying starts
    ingest(principal, "facts")
    fake_llm.queue_json({"operations": [add_op("The user likes tea")]})
    run = extract(principal, llm)
    assert (run.state, run.error_class) == (RunState.FAILED, "ExtractionTimeout")
    assert "0 of 1 operations applied" in run.error_message
    assert formed() == 0
    assert Thread.objects.get().extracted_seq == 0


@pytest.mark.django_db
def test_a_nul_in_one_operation_drops_that_operation_only(principal, fake_llm, llm):
    ingest(principal, "facts")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user likes tea"),
                add_op("The user \x00 likes ice cream"),
                add_op(
                    "The user lives in Porto", mentions=[{"name": "Po\x00rto", "type": "place"}]
                ),
                add_op("The user rides a bike"),
            ]
        }
    )
    run = extract(principal, llm)
    assert run.state == RunState.DONE
    assert (run.error_class, run.error_message) == ("", "")
    assert {k: v for k, v in run.counts.items() if v} == {"added": 2, "invalid": 2}
    assert sorted(Memory.objects.values_list("text", flat=True)) == [
        "The user likes tea",
        "The user rides a bike",
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("purge", [True, False])
def test_an_erasure_while_the_run_waits_on_the_model_is_an_expected_outcome(
    purge, agent, fake_llm, llm, caplog
):
    alice = Principal(tenant=agent.tenant, agent=agent, bound_subject="alice")
    admin = Principal(
        tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write", "admin"})
    )
    ingest(alice, "I am Alice and I like tea")
    run = queued_run(Thread.objects.get())

    def erase_then_answer(request):
        try:
            subject_erase(principal=admin, subject_id="alice", purge=purge)
        finally:
            connection.close()  # the fake server's request thread: its own connection
        return {"operations": [add_op("Alice likes tea")]}

    fake_llm.default_reply = erase_then_answer
    with caplog.at_level(logging.INFO):
        run_execute(run.pk, llm=llm, now=NOW)  # raises nothing

    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert formed() == 0
    if purge:
        assert not ExtractionRun.objects.exists()
    else:
        run.refresh_from_db()
        assert (run.state, run.error_class) == (RunState.FAILED, "SubjectErased")
        assert run.answer is None  # what the model said about her is not kept
        assert run.prompt_tokens > 0

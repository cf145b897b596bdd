"""Formation confined to its thread's subject (docs/formation.md#what-a-conversation-may-change):
what the extraction prompt may show, which memories the model's operations may change, and where a
formed `add` looks for near duplicates. The model is the scripted stand-in over real HTTP; every
memory is real."""

from __future__ import annotations

import pytest
from django.db import connection

from accounts.principal import Principal
from memories.formation.prompt_context import related_memories
from memories.formation.runs import run_execute
from memories.models import ExtractionRun, Memory, RunState, Thread
from memories.services.lifecycle import memory_forget
from memories.services.operator_actions import memory_tombstone
from memories.services.store import memory_store
from tests.factories import make_agent
from tests.support.formation import NOW, add_op, extract, ingest, update_op

ALICE = "alice"


@pytest.fixture
def alice(agent):
    """The thread's agent acting for end user alice (a key bound to her)."""
    return Principal(tenant=agent.tenant, agent=agent, bound_subject=ALICE)


@pytest.fixture
def general(agent):
    """The thread's agent acting for no end user."""
    return Principal(tenant=agent.tenant, agent=agent)


def put(principal, text, **fields):
    body = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=body, now=NOW).memory


@pytest.fixture
def world(tenant, other_tenant, agent, alice, general):
    """One memory in every place a thread of alice's might reach, each naming Lisbon (so the
    search ranks them all against her message): `shown` ones the prompt may hold (`operable`
    or `read_only`), and `hidden` ones it must never hold."""
    sales = make_agent(tenant, "sales")
    agent.reads_from.set([sales])  # even an agent it reads from is not formation's to show
    agent._reads_from_ids = None
    sales_alice = Principal(tenant=tenant, agent=sales, bound_subject=ALICE)
    globex = Principal(
        tenant=other_tenant, agent=make_agent(other_tenant, "support-bot"), bound_subject=ALICE
    )
    bob = Principal(tenant=tenant, agent=agent, bound_subject="bob")
    forgotten = put(alice, "Alice once lived in a Lisbon flat by the river")
    memory_forget(principal=alice, memory_id=forgotten.pk, now=NOW)
    forgotten.refresh_from_db()
    return {
        "operable": {
            "core": put(alice, "Alice lives in Lisbon near the castle"),
            "daily": put(alice, "Alice visits Lisbon museums this week", category="daily"),
        },
        "read_only": {
            "subject_less": put(general, "The Lisbon office opens at nine"),
            "workspace": put(general, "The Lisbon office wifi is guest", category="workspace"),
            "workspace_alice": put(alice, "Alice has a Lisbon badge", category="workspace"),
        },
        "hidden": {
            "bob": put(bob, "Bob lives in Lisbon too"),
            "conversation_other_thread": put(
                alice, "Alice asked about Lisbon trams", category="conversation", thread_id="t-2"
            ),
            "conversation_this_thread": put(
                alice, "Alice asked about Lisbon ferries", category="conversation", thread_id="t-1"
            ),
            "shared_agent": put(sales_alice, "Alice bought Lisbon tickets from sales"),
            "other_tenant": put(globex, "Alice lives in Lisbon at globex"),
            "forgotten": forgotten,
        },
    }


def memory_lines(prompt: str) -> list[str]:
    section = prompt.split("## Related memories\n", 1)[1].split("\n\n## ", 1)[0]
    return section.splitlines()


@pytest.mark.django_db
def test_the_prompt_holds_her_memories_to_change_and_shared_ones_read_only_and_nothing_else(
    alice, fake_llm, llm, world
):
    ingest(alice, "I love Lisbon, the castle and the museums")
    run = extract(alice, llm)

    lines = memory_lines(fake_llm.last_request.prompt)
    expected = [
        f"({m.pk} v{m.version} {m.category}) {m.text}" for m in world["operable"].values()
    ] + [
        f"({m.pk} v{m.version} {m.category}) (read-only) {m.text}"
        for m in world["read_only"].values()
    ]
    assert sorted(lines) == sorted(expected)
    prompt = str([r.body for r in fake_llm.requests])
    for name, memory in world["hidden"].items():
        assert memory.pk not in prompt and memory.text not in prompt, name
    assert sorted(run.offered_ids) == sorted(m.pk for m in world["operable"].values())


@pytest.mark.django_db
def test_a_thread_without_a_subject_may_change_the_agents_subject_less_memories(
    general, fake_llm, llm, world
):
    ingest(general, "When does the Lisbon office open? And the museums?")
    fake_llm.queue_json(
        {
            "operations": [
                update_op(world["read_only"]["subject_less"].pk, "The Lisbon office opens at 8"),
                update_op(world["read_only"]["workspace"].pk, "The Lisbon wifi is closed"),
                update_op(world["operable"]["core"].pk, "Alice moved"),
            ]
        }
    )
    run = extract(general, llm)

    lines = memory_lines(fake_llm.requests[0].prompt)
    subject_less, workspace = world["read_only"]["subject_less"], world["read_only"]["workspace"]
    assert sorted(lines) == sorted(
        [
            f"({subject_less.pk} v1 core) {subject_less.text}",
            f"({workspace.pk} v1 workspace) (read-only) {workspace.text}",
        ]
    )
    assert {k: v for k, v in run.counts.items() if v} == {
        "updated": 1,
        "out_of_scope": 1,  # the workspace's
        "invalid": 1,  # alice's: not this thread's subject, as a 404
    }
    subject_less.refresh_from_db()
    assert (subject_less.text, subject_less.version) == ("The Lisbon office opens at 8", 2)
    assert Memory.objects.get(pk=workspace.pk).version == 1
    assert Memory.objects.get(pk=world["operable"]["core"].pk).version == 1


def _operation(kind: str, memory: Memory) -> dict:
    if kind == "update":
        return update_op(memory.pk, "Rewritten by the conversation", version=memory.version)
    if kind == "forget":
        return {
            "op": "forget",
            "memory_id": memory.pk,
            "version": memory.version,
            "reason": "contradicted",
            "evidence": [1],
        }
    return {"op": "confirm", "memory_id": memory.pk, "evidence": [1]}


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["update", "forget", "confirm"])
def test_every_operation_outside_the_subjects_scope_is_dropped(
    kind, alice, fake_llm, llm, monkeypatch, world
):
    """The isolation matrix, for formation: a model that obeys an injected instruction and
    aims an operation at each memory it must not change. Those the agent owns and sees for
    alice but formation may not change are `out_of_scope`; those it cannot see at all are
    `invalid`, exactly as the API answers 404 for another's and for a missing memory."""
    diary = put(alice, "Alice keeps a Lisbon diary")  # hers, in scope, but not among those shown
    real = related_memories

    def shown_without_the_diary(**kwargs):
        return [m for m in real(**kwargs) if m.memory_id != diary.pk]

    monkeypatch.setattr("memories.formation.runs.related_memories", shown_without_the_diary)
    ingest(alice, "I love Lisbon, the castle and the museums")
    targets = {
        **world["read_only"],
        "not_offered": diary,
        "conversation_other_thread": world["hidden"]["conversation_other_thread"],
        "conversation_this_thread": world["hidden"]["conversation_this_thread"],
        "bob": world["hidden"]["bob"],
        "shared_agent": world["hidden"]["shared_agent"],
        "other_tenant": world["hidden"]["other_tenant"],
        "forgotten": world["hidden"]["forgotten"],
    }
    legit = world["operable"]["core"]
    missing = {**_operation(kind, legit), "memory_id": "mem_01JZZZZZZZZZZZZZZZZZZZZZZZ"}
    operations = [_operation(kind, m) for m in targets.values()]
    fake_llm.queue_json({"operations": [*operations, missing, _operation(kind, legit)]})
    run = extract(alice, llm)

    assert diary.pk not in fake_llm.last_request.prompt
    assert run.state == RunState.DONE
    done = {"update": "updated", "forget": "forgotten", "confirm": "confirmed"}[kind]
    assert {k: v for k, v in run.counts.items() if v} == {
        done: 1,
        # subject-less, workspace, alice's workspace, not offered, two conversation memories
        "out_of_scope": 6,
        # bob's, the shared agent's, another tenant's, a forgotten one, a missing id
        "invalid": 5,
    }
    for name, memory in targets.items():
        current = Memory.objects.get(pk=memory.pk)
        assert (current.version, current.status, current.text) == (
            memory.version,
            memory.status,
            memory.text,
        ), name
    assert Memory.objects.get(pk=legit.pk).version == 2


@pytest.mark.django_db
def test_the_invalid_outcome_is_what_the_api_would_answer_404_for(alice, tenant, fake_llm, llm):
    """`invalid` counted for each kind of memory the thread's agent cannot change at all."""
    other_agent = Principal(tenant=tenant, agent=make_agent(tenant, "billing"), bound_subject=ALICE)
    theirs = put(other_agent, "Alice pays by card")
    gone = put(alice, "Alice pays in cash")
    memory_forget(principal=alice, memory_id=gone.pk, now=NOW)
    ingest(alice, "I pay by card now")
    fake_llm.queue_json(
        {
            "operations": [
                update_op(theirs.pk, "Alice pays by card (confirmed)"),
                _operation("forget", gone),
                _operation("confirm", theirs),
                update_op("mem_01JZZZZZZZZZZZZZZZZZZZZZZZ", "x"),
                update_op("not-an-id", "x"),
            ]
        }
    )
    run = extract(alice, llm)
    assert {k: v for k, v in run.counts.items() if v} == {"invalid": 5}
    assert Memory.objects.get(pk=theirs.pk).version == 1
    assert Memory.objects.get(pk=gone.pk).status == "tombstoned"


@pytest.mark.django_db
def test_a_subject_less_look_alike_never_absorbs_a_fact_formed_for_her(
    alice, general, fake_llm, llm, tenant
):
    blue = put(general, "The user's favourite colour is blue")
    wrong = put(general, "The user is called Bob")
    memory_tombstone(tenant=tenant, memory_id=wrong.pk, actor="operator:a@b.c", reason="no")
    hers = put(alice, "The user is allergic to nuts")
    memory_tombstone(tenant=tenant, memory_id=hers.pk, actor="operator:a@b.c", reason="wrong")
    ingest(alice, "My favourite colour is blue. Call me Bob. I'm allergic to nuts.")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user's favourite colour is blue"),
                add_op("The user is called Bob"),
                add_op("The user is allergic to nuts"),
            ]
        }
    )
    run = extract(alice, llm)

    # Her own tombstone still blocks; the subject-less memory and tombstone are not hers.
    assert {k: v for k, v in run.counts.items() if v} == {
        "added": 2,
        "blocked_by_correction": 1,
    }
    formed = Memory.objects.filter(subject_id=ALICE, status="active")
    assert sorted(formed.values_list("text", flat=True)) == [
        "The user is called Bob",
        "The user's favourite colour is blue",
    ]
    blue.refresh_from_db()
    assert (blue.version, blue.subject_id) == (1, None)


@pytest.mark.django_db
def test_an_add_neither_creates_a_workspace_memory_nor_takes_a_key_outside_the_scope(
    alice, agent, fake_llm, llm
):
    agent.extraction_categories = ["core", "daily", "workspace"]
    agent.save()
    keyed = put(
        alice, "Alice is in Lisbon", key="user.city", category="conversation", thread_id="t-2"
    )
    ingest(alice, "I moved to Porto; tell every agent")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user lives in Porto", category="workspace"),
                add_op("The user lives in Porto", key="user.city"),
                add_op("The user moved in May", key="user.moved"),
            ]
        }
    )
    run = extract(alice, llm)

    assert {k: v for k, v in run.counts.items() if v} == {"added": 1, "out_of_scope": 2}
    assert not Memory.objects.filter(agent__isnull=True).exists()
    keyed.refresh_from_db()
    assert (keyed.text, keyed.version) == ("Alice is in Lisbon", 1)


@pytest.mark.django_db(transaction=True)
def test_a_retried_run_judges_its_kept_answer_by_what_the_model_was_shown(
    alice, fake_llm, llm, monkeypatch, world
):
    """The offered set is kept with the answer: a retry after a crash does not offer afresh
    (which would now include a memory stored meanwhile)."""
    ingest(alice, "I love Lisbon, the castle and the museums")
    later = {}

    def answer(request):
        try:
            later["memory"] = put(alice, "Alice likes the Lisbon castle gardens")
        finally:
            connection.close()  # the fake server's request thread: its own connection
        core = world["operable"]["core"]
        return {
            "operations": [
                update_op(later["memory"].pk, "Alice loves the castle gardens"),
                update_op(core.pk, "Alice lives in Lisbon by the castle"),
            ]
        }

    fake_llm.default_reply = answer

    class WorkerDied(BaseException):
        pass

    def die(**kwargs):
        raise WorkerDied

    monkeypatch.setattr("memories.formation.runs.apply_operations", die)
    thread = Thread.objects.get(subject_id=ALICE)
    # Queued as a worker finds it (run_request would run it here: the suite's cluster is sync).
    run = ExtractionRun.objects.create(
        tenant=thread.tenant, thread=thread, agent=thread.agent, trigger="now"
    )
    with pytest.raises(WorkerDied):
        run_execute(run.pk, llm=llm, now=NOW)
    monkeypatch.undo()
    kept = ExtractionRun.objects.get(pk=run.pk)
    assert (kept.state, kept.answer is not None) == (RunState.RUNNING, True)

    run = run_execute(run.pk, llm=llm, now=NOW)  # the worker's lock died with it: taken over

    assert len(fake_llm.requests) == 1
    assert sorted(run.offered_ids) == sorted(m.pk for m in world["operable"].values())
    assert {k: v for k, v in run.counts.items() if v} == {"updated": 1, "out_of_scope": 1}
    assert Memory.objects.get(pk=later["memory"].pk).version == 1

"""The formation half of the memory model
(docs/memory-model.md#formation-kinds-user-scope-and-earlier-context): earlier messages as
read-only context, the tenant's kinds in the prompt and an `add`'s `kind`/`data`, a `single`
kind's replace, and user-scoped memories formed from a conversation. The model is the scripted
stand-in over real HTTP; every memory is real, and what other agents then read goes through
the REST API."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.formation.prompt_context import EARLIER_MAX_CHARS
from memories.formation.prompts import KIND_SCHEMA_CHARS, KINDS_MAX_CHARS
from memories.models import Memory, MemoryRevision
from memories.services.kind_changes import kind_save
from memories.services.store import memory_store
from tests.factories import make_agent
from tests.support.formation import NOW, add_op, extract, ingest, update_op

ALICE, BOB = "alice", "bob"


@pytest.fixture
def alice(agent):
    """The thread's agent acting for end user alice (a key bound to her)."""
    return Principal(tenant=agent.tenant, agent=agent, bound_subject=ALICE)


def section(prompt: str, title: str) -> str:
    """One `## <title>` section of the extraction prompt's user message."""
    return prompt.split(f"## {title}\n", 1)[1].split("\n\n## ", 1)[0]


def counts(run) -> dict[str, int]:
    return {name: n for name, n in run.counts.items() if n}


def put(principal, text, **fields):
    body = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=body, now=NOW).memory


# --- earlier messages ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_second_run_sees_the_first_runs_messages_as_earlier_context(alice, fake_llm, llm):
    ingest(alice, "My sister Ana lives in Porto", "Nice city!")
    extract(alice, llm)
    ingest(alice, "She just got a job at Farfetch")
    fake_llm.queue_json(
        {"operations": [add_op("The user's sister Ana works at Farfetch", evidence=[1, 3, 9])]}
    )
    run = extract(alice, llm)

    prompt = fake_llm.last_request.messages[1]["content"]
    assert section(prompt, "Earlier messages").splitlines() == [
        "--- 2026-05-01 (Friday) ---",
        "[1] (earlier) user: My sister Ana lives in Porto",
        "[2] (earlier) assistant: Nice city!",
    ]
    assert section(prompt, "New messages").splitlines()[1:] == [
        "[3] user: She just got a job at Farfetch"
    ]
    assert (run.from_seq, run.to_seq) == (3, 3)  # operations are formed from the new ones
    # An evidence citing an earlier message is accepted; a seq the model was not shown is not.
    memory = Memory.objects.get(text="The user's sister Ana works at Farfetch")
    assert memory.evidence == {"thread_id": "t-1", "messages": [1, 3], "run_id": run.pk}


@pytest.mark.django_db
def test_context_messages_bounds_the_earlier_messages_and_0_shows_none(alice, agent, fake_llm, llm):
    ingest(alice, "one", "two", "three")
    extract(alice, llm)
    agent.context_messages = 2
    agent.save()
    ingest(alice, "four")
    extract(alice, llm)
    earlier = section(fake_llm.last_request.prompt, "Earlier messages").splitlines()
    assert earlier[1:] == ["[2] (earlier) assistant: two", "[3] (earlier) user: three"]

    agent.context_messages = 0
    agent.save()
    ingest(alice, "five")
    fake_llm.queue_json({"operations": [add_op("The user counts", evidence=[4, 5])]})
    run = extract(alice, llm)
    prompt = fake_llm.last_request.messages[1]["content"]
    assert section(prompt, "Earlier messages") == "(none)"
    assert "(earlier)" not in prompt
    assert Memory.objects.get(text="The user counts").evidence["messages"] == [5]
    assert run.from_seq == 5


@pytest.mark.django_db
def test_a_huge_earlier_message_is_cut_to_the_character_bound(alice, fake_llm, llm):
    huge = "start " + "x" * 15_000 + " the end"  # one window (summary_threshold_bytes)
    ingest(alice, "an older message", huge)
    extract(alice, llm)
    ingest(alice, "what did I just paste?")
    extract(alice, llm)

    earlier = section(fake_llm.last_request.prompt, "Earlier messages")
    [line] = [line for line in earlier.splitlines() if line.startswith("[")]
    content = line.removeprefix("[2] (earlier) assistant: ")
    assert len(content) == EARLIER_MAX_CHARS
    assert content.startswith("…x") and content.endswith("x the end")
    assert "an older message" not in earlier  # nothing before a message that was cut


# --- kinds in the prompt and in an add -----------------------------------------------------------

SHOE = {
    "type": "object",
    "properties": {"size": {"type": "integer", "minimum": 30}, "brand": {"type": "string"}},
    "required": ["size"],
    "additionalProperties": False,
}


@pytest.mark.django_db
def test_the_prompt_lists_the_tenants_kinds_bounded_in_size(alice, tenant, fake_llm, llm):
    kind_save(tenant=tenant, name="ShoeSize", data={"description": "Shoe size", "schema": SHOE})
    big = {
        "type": "object",
        "properties": {f"field_{i}": {"type": "string"} for i in range(200)},
    }
    kind_save(tenant=tenant, name="Huge", data={"description": "Too big", "schema": big})
    for i in range(60):
        kind_save(tenant=tenant, name=f"Zextra{i:02d}", data={"description": "x" * 150})
    ingest(alice, "I wear size 42")
    extract(alice, llm)

    kinds = section(fake_llm.last_request.prompt, "Memory kinds")
    lines = kinds.splitlines()
    # The built-in kinds first, then the tenant's by name.
    assert lines[0] == (
        "- fact (multiple): One distilled fact, a sentence or two (the default kind). No schema."
    )
    assert lines[1].startswith("- UserProfile (single): Who the user is") and (
        'Schema of data: {"additionalProperties": true,' in lines[1]
    )
    assert (
        "- Huge (multiple): Too big Its schema is too long to show here: do not use this kind."
        in lines
    )
    assert (
        '- ShoeSize (multiple): Shoe size Schema of data: {"additionalProperties": false, '
        '"properties": {"brand": {"type": "string"}, "size": {"minimum": 30, "type": "integer"}}, '
        '"required": ["size"], "type": "object"}'
    ) in lines
    assert len(kinds) < KINDS_MAX_CHARS + 500
    assert lines[-2].endswith("more kinds not shown)")
    assert lines[-1].startswith("User scope: available")
    assert len(str(big)) > KIND_SCHEMA_CHARS


@pytest.mark.django_db
def test_an_add_carries_kind_and_data_and_data_failing_the_schema_is_invalid(
    alice, tenant, fake_llm, llm
):
    kind_save(tenant=tenant, name="ShoeSize", data={"description": "Shoe size", "schema": SHOE})
    ingest(alice, "I wear size 42 Asics, my son wears 12")
    fake_llm.queue_json(
        {
            "operations": [
                add_op(
                    "The user wears size 42", kind="ShoeSize", data='{"size": 42, "brand": "Asics"}'
                ),
                add_op("The user's son wears 12", kind="ShoeSize", data='{"size": 12}'),
                add_op("The user wears shoes", kind="ShoeSize", data=None),  # size is required
                add_op("The user runs", kind="fact", data='{"sport": "running"}'),
            ]
        }
    )
    run = extract(alice, llm)

    assert counts(run) == {"added": 2, "invalid": 2}
    shoe = Memory.objects.get(kind="ShoeSize")
    assert (shoe.text, shoe.data, shoe.subject_id) == (
        "The user wears size 42",
        {"size": 42, "brand": "Asics"},
        ALICE,
    )
    assert Memory.objects.get(text="The user runs").data == {"sport": "running"}


@pytest.mark.django_db
def test_formed_data_meets_the_bounded_schema_check_and_hostile_data_is_invalid(
    alice, tenant, fake_llm, llm
):
    """A model's `data` goes through the same check as a store: a backtracking pattern answers
    at once, and a check past its budget drops the operation as `invalid`, like any failure."""
    doubling = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(16)
    }
    doubling["d16"] = {"type": "array"}
    schema = {
        "properties": {
            "code": {"type": "string", "pattern": "^(a+)+$"},
            "parts": {"if": {"type": "array"}, "then": {"$ref": "#/$defs/d0"}},
        },
        "$defs": doubling,
    }
    kind_save(tenant=tenant, name="Code", data={"schema": schema})
    ingest(alice, "My code is aaaa, and here are some parts")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user's code", kind="Code", data='{"code": "' + "a" * 50 + '!"}'),
                add_op("The user's parts", kind="Code", data='{"parts": []}'),
                add_op("The user's code is aaaa", kind="Code", data='{"code": "aaaa"}'),
            ]
        }
    )
    run = extract(alice, llm)

    assert counts(run) == {"added": 1, "invalid": 2}
    assert Memory.objects.get(kind="Code").data == {"code": "aaaa"}


@pytest.mark.django_db
def test_an_add_of_a_single_kind_replaces_the_record_with_evidence_and_review(
    alice, agent, fake_llm, llm
):
    profile = put(
        alice, "Alice, a designer", kind="UserProfile", data={"name": "Alice", "job": "designer"}
    )
    ingest(alice, "I moved to Porto, by the way")
    fake_llm.queue_json(
        {
            "operations": [
                add_op(
                    "Alice, a designer in Porto",
                    kind="UserProfile",
                    data='{"name": "Alice", "job": "designer", "location": "Porto"}',
                    confidence=0.7,  # below review_below (0.8): waits for review
                ),
            ]
        }
    )
    run = extract(alice, llm)

    assert counts(run) == {"updated": 1, "pending_review": 1}
    assert Memory.objects.filter(kind="UserProfile").count() == 1
    profile.refresh_from_db()
    assert (profile.version, profile.text, profile.data["location"]) == (
        2,
        "Alice, a designer in Porto",
        "Porto",
    )
    assert profile.evidence == {"thread_id": "t-1", "messages": [1], "run_id": run.pk}
    assert (profile.review_state, profile.review_reason) == ("pending", "low_confidence")
    revision = MemoryRevision.objects.get(memory=profile, version=2)
    assert (revision.actor, revision.reason) == ("system:extract", "replaced")
    assert revision.before["text"] == "Alice, a designer"


@pytest.mark.django_db
def test_a_single_kinds_record_outside_the_formation_scope_is_not_replaced(
    alice, agent, fake_llm, llm
):
    """The kind's one record for the agent and alice is a `conversation` memory: formation may
    not change it (`visibility.formation_q`), so the add is `out_of_scope`, not a replace."""
    record = put(
        alice,
        "Alice, on this call",
        kind="AgentInstructions",
        category="conversation",
        thread_id="t-other",
    )
    ingest(alice, "From now on answer in Portuguese")
    fake_llm.queue_json(
        {"operations": [add_op("Answer Alice in Portuguese", kind="AgentInstructions")]}
    )
    run = extract(alice, llm)

    assert counts(run) == {"out_of_scope": 1}
    record.refresh_from_db()
    assert (record.version, record.text) == (1, "Alice, on this call")
    assert Memory.objects.filter(kind="AgentInstructions").count() == 1


# --- user scope ----------------------------------------------------------------------------------


def recall(client, key, subject_id=None):
    query = f"?subject_id={subject_id}" if subject_id else ""
    response = client.get(f"/api/v1/memories/by-key/{key}{query}")
    return response.json()["memory"] if response.status_code == 200 else None


def hydrated(client, **body):
    response = client.post("/api/v1/hydrate", body, format="json")
    return {entry["id"] for entry in response.json()["entries"]}


@pytest.mark.django_db
def test_a_user_memory_formed_for_alice_is_seen_by_another_agent_acting_for_her_only(
    alice, tenant, key_client, fake_llm, llm
):
    ingest(alice, "I'm allergic to peanuts, and I like this bot's short answers")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user is allergic to peanuts", key="user.allergy", scope="user"),
                add_op("The user likes short answers", scope="agent"),
            ]
        }
    )
    run = extract(alice, llm)
    assert counts(run) == {"added": 2}
    allergy = Memory.objects.get(key="user.allergy")
    assert (allergy.scope, allergy.agent_id, allergy.subject_id) == ("user", None, ALICE)
    assert allergy.created_by == "system:extract" and allergy.evidence["run_id"] == run.pk
    style = Memory.objects.get(text="The user likes short answers")
    assert (style.scope, style.agent_id) == ("agent", alice.agent.pk)

    booking = key_client(make_agent(tenant, "booking-bot"))
    seen = recall(booking, "user.allergy", subject_id=ALICE)
    assert (seen["id"], seen["scope"], seen["source"]) == (allergy.pk, "user", "user")
    assert hydrated(booking, subject_id=ALICE) == {allergy.pk}  # not the other agent's own
    assert recall(booking, "user.allergy", subject_id=BOB) is None
    assert recall(booking, "user.allergy") is None
    assert hydrated(booking, subject_id=BOB) == set()
    assert hydrated(booking) == set()


@pytest.mark.django_db
def test_without_formation_user_scope_or_a_subject_a_user_fact_is_formed_for_the_agent(
    alice, agent, fake_llm, llm
):
    agent.formation_user_scope = False
    agent.save()
    ingest(alice, "I'm allergic to peanuts")
    fake_llm.queue_json({"operations": [add_op("The user is allergic to peanuts", scope="user")]})
    extract(alice, llm)
    assert section(fake_llm.last_request.prompt, "Memory kinds").splitlines()[-1] == (
        'User scope: not available in this conversation (always "scope": "agent").'
    )
    memory = Memory.objects.get()
    assert (memory.scope, memory.agent_id, memory.subject_id) == ("agent", agent.pk, ALICE)

    agent.formation_user_scope = True
    agent.save()
    nobody = Principal(tenant=agent.tenant, agent=agent)
    ingest(nobody, "I'm allergic to cats", thread_id="t-none")
    fake_llm.queue_json({"operations": [add_op("The user is allergic to cats", scope="user")]})
    run = extract(nobody, llm, thread_id="t-none")
    assert counts(run) == {"added": 1}
    assert "User scope: not available" in fake_llm.last_request.prompt
    cats = Memory.objects.get(text="The user is allergic to cats")
    assert (cats.scope, cats.agent_id, cats.subject_id) == ("agent", agent.pk, None)


@pytest.mark.django_db
def test_her_user_memories_are_offered_marked_and_another_subjects_are_out_of_scope(
    alice, tenant, agent, fake_llm, llm
):
    other = make_agent(tenant, "billing-bot")
    hers = put(
        Principal(tenant=tenant, agent=other, bound_subject=ALICE),
        "The user lives in Lisbon",
        scope="user",
        kind="UserProfile",
        data={"location": "Lisbon"},
    )
    bobs = put(
        Principal(tenant=tenant, agent=agent, bound_subject=BOB),
        "The user lives in Lisbon",
        scope="user",
    )
    ingest(alice, "I live in Porto now, not Lisbon")
    fake_llm.queue_json(
        {
            "operations": [
                update_op(bobs.pk, "The user lives in Porto"),
                {
                    "op": "forget",
                    "memory_id": bobs.pk,
                    "version": 1,
                    "reason": "moved",
                    "evidence": [1],
                },
                add_op(
                    "The user lives in Porto",
                    kind="UserProfile",
                    data='{"location": "Porto"}',
                    scope="user",
                ),
            ]
        }
    )
    run = extract(alice, llm)

    lines = section(fake_llm.last_request.prompt, "Related memories").splitlines()
    assert lines == [
        f"({hers.pk} v1 core) (user) The user lives in Lisbon [kind: UserProfile] "
        '[data: {"location": "Lisbon"}]'
    ]
    assert run.offered_ids == [hers.pk]
    # Bob's user memory is of the kind formation may change, not of this thread's subject.
    assert counts(run) == {"out_of_scope": 2, "updated": 1}
    bobs.refresh_from_db()
    assert (bobs.version, bobs.status, bobs.text) == (1, "active", "The user lives in Lisbon")
    hers.refresh_from_db()  # the single kind's user record, replaced for every agent
    assert (hers.version, hers.text, hers.data, hers.agent_id) == (
        2,
        "The user lives in Porto",
        {"location": "Porto"},
        None,
    )


# --- erasure -------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("purge", [True, False])
def test_erasing_the_subject_erases_her_formed_user_memories_and_their_history(
    purge, alice, agent, key_client, fake_llm, llm
):
    ingest(alice, "I'm allergic to peanuts")
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user is allergic to peanuts", key="user.allergy", scope="user")
            ]
        }
    )
    extract(alice, llm)
    memory = Memory.objects.get(scope="user")
    ingest(alice, "and to cashews")
    fake_llm.queue_json(
        {"operations": [update_op(memory.pk, "The user is allergic to peanuts and cashews")]}
    )
    assert counts(extract(alice, llm)) == {"updated": 1}

    admin = key_client(agent, scopes=["read", "write", "admin"])
    erased = admin.delete(f"/api/v1/subjects/{ALICE}{'?purge=true' if purge else ''}").json()
    assert erased["memories"] == 1
    memory.refresh_from_db()
    assert recall(admin, "user.allergy", subject_id=ALICE) is None
    assert hydrated(key_client(make_agent(agent.tenant, "booking-bot")), subject_id=ALICE) == set()
    if purge:
        assert (memory.text, memory.purged_at is not None) == ("", True)
        history = str(list(MemoryRevision.objects.filter(memory=memory).values("before", "after")))
        assert "peanuts" not in history and "cashews" not in history
    else:
        assert memory.status == "tombstoned"

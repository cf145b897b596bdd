"""Threads and messages in (docs/formation.md#endpoints): redaction before storage, duplicate
skipping, seqs, the extraction state an ingest answers with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.principal import Principal
from memories.formation.ingest import thread_get, thread_messages_add
from memories.models import Message, Thread
from memoryhub.errors import InvalidInput, NotFound, ScopeDenied, SecretRejected
from tests.factories import make_agent

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"


def conversation(*pairs):
    return [{"role": role, "content": content} for role, content in pairs]


def add(principal, messages, thread_id="t-1", now=NOW, **extra):
    return thread_messages_add(
        principal=principal, thread_id=thread_id, data={"messages": messages, **extra}, now=now
    )


@pytest.mark.django_db
def test_messages_get_dense_seqs_and_the_thread_counts_them(principal):
    result = add(principal, conversation(("user", "I moved to Lisbon"), ("assistant", "Nice!")))
    assert (result.accepted, result.duplicates, result.redacted) == (2, 0, 0)
    thread = Thread.objects.get()
    assert (thread.last_seq, thread.message_count, thread.last_message_at) == (2, 2, NOW)
    add(principal, conversation(("user", "and I work at Acme")), now=NOW + timedelta(seconds=5))
    rows = list(Message.objects.order_by("seq").values_list("seq", "role", "content"))
    assert rows == [
        (1, "user", "I moved to Lisbon"),
        (2, "assistant", "Nice!"),
        (3, "user", "and I work at Acme"),
    ]


@pytest.mark.django_db
def test_resending_a_whole_conversation_stores_only_the_new_messages(principal):
    first = [
        {"role": "user", "content": "hi", "created_at": "2026-05-01T10:00:00Z"},
        {"role": "assistant", "content": "hello", "created_at": "2026-05-01T10:00:01Z"},
    ]
    add(principal, first)
    again = [*first, {"role": "user", "content": "hi", "created_at": "2026-05-01T10:05:00Z"}]
    result = add(principal, again)
    assert (result.accepted, result.duplicates) == (1, 2)
    assert list(Message.objects.order_by("seq").values_list("seq", "content")) == [
        (1, "hi"),
        (2, "hello"),
        (3, "hi"),
    ]


@pytest.mark.django_db
def test_a_pasted_token_is_redacted_before_storage(principal):
    result = add(principal, conversation(("user", f"my token is {TOKEN} keep it")))
    assert result.redacted == 1
    message = Message.objects.get()
    assert message.content == "my token is [redacted:github_token] keep it"
    assert message.redactions == ["github_token"]
    assert TOKEN not in str(list(Message.objects.values()))
    # resending the same pasted message is still recognised as a duplicate
    assert add(principal, conversation(("user", f"my token is {TOKEN} keep it"))).duplicates == 1


@pytest.mark.django_db
def test_threads_are_per_subject_and_another_subjects_thread_is_not_found(principal, agent):
    add(principal, conversation(("user", "a")), subject_id="alice")
    add(principal, conversation(("user", "b")), subject_id="bob")
    assert Thread.objects.count() == 2
    assert thread_get(principal=principal, thread_id="t-1", subject_id="alice").message_count == 1
    with pytest.raises(NotFound):
        thread_get(principal=principal, thread_id="t-1")
    bound = Principal(tenant=agent.tenant, agent=agent, bound_subject="alice")
    with pytest.raises(ScopeDenied):
        thread_get(principal=bound, thread_id="t-1", subject_id="bob")
    other = Principal(tenant=agent.tenant, agent=make_agent(agent.tenant, "other-bot"))
    with pytest.raises(NotFound):
        thread_get(principal=other, thread_id="t-1", subject_id="alice")


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}] * 101}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x" * 32001}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": "x", "mood": 1}]}, "messages[0].mood"),
        (
            {"messages": [{"role": "user", "content": "x", "created_at": "soon"}]},
            "messages[0].created_at",
        ),
        ({"messages": [{"role": "user", "content": "x"}], "extract": "later"}, "extract"),
        ({"messages": [{"role": "user", "content": "x"}], "colour": 1}, "colour"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(principal, data, field):
    with pytest.raises(InvalidInput) as caught:
        thread_messages_add(principal=principal, thread_id="t-1", data=data, now=NOW)
    assert caught.value.details["field"] == field
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_secret_in_the_thread_id_is_rejected(principal):
    with pytest.raises(SecretRejected):
        add(principal, conversation(("user", "x")), thread_id=f"t-{TOKEN}")
    assert not Thread.objects.exists()


@pytest.mark.django_db
def test_without_an_llm_messages_are_kept_and_extraction_is_disabled(principal, settings):
    settings.MEMORYHUB_LLM_URL = ""
    result = add(principal, conversation(("user", "x")))
    assert result.accepted == 1
    assert result.extraction["state"] == "disabled"
    assert "MEMORYHUB_LLM_URL" in result.extraction["reason"]
    assert Thread.objects.get().extraction_due_at is None


@pytest.mark.django_db
def test_auto_schedules_the_thread_once_idle(principal, fake_llm):
    result = add(principal, conversation(("user", "x")))
    due = NOW + timedelta(seconds=120)
    assert result.extraction == {"state": "scheduled", "due_at": "2026-05-01T12:02:00.000000Z"}
    assert Thread.objects.get().extraction_due_at == due
    # a later message pushes it back: the thread is extracted once it settles
    add(principal, conversation(("user", "y")), now=NOW + timedelta(seconds=60))
    assert Thread.objects.get().extraction_due_at == due + timedelta(seconds=60)


@pytest.mark.django_db
def test_off_stores_without_scheduling(principal, fake_llm):
    result = add(principal, conversation(("user", "x")), extract="off")
    assert result.extraction == {"state": "off"}
    assert Thread.objects.get().extraction_due_at is None

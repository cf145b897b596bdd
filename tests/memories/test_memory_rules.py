"""The rules between a memory's fields live in one function, `inputs.memory_fields_check`: a
conversation memory needs a thread; a user memory has no agent, needs a subject and is neither
workspace nor conversation; otherwise workspace if and only if no agent. Every write path calls
it (store, PATCH, the console's correction, JSONL import; formation's in tests/formation), and
the database holds the conversation rule too (`memory_conversation_thread`)."""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, connection, transaction

from accounts.principal import Principal
from memories import inputs
from memories.models import Memory
from memories.services.jsonl_import import ImportLineError, jsonl_import
from memories.services.operator_actions import memory_correct
from memories.services.store import memory_store
from memoryhub.errors import InvalidInput
from tests.support.memories import spy_on_fields_check

pytestmark = pytest.mark.django_db

NEW_ID = "mem_01ARZ3NDEKTSV4RRFFQ69G5FA1"


@pytest.fixture
def rule_calls(monkeypatch):
    """Every call of the rule function, with what it raised (None when the memory passed)."""
    return spy_on_fields_check(monkeypatch)


def _store(agent, **data):
    principal = Principal(tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write"}))
    return memory_store(principal=principal, data={"dedup_policy": "insert", **data}).memory


@pytest.mark.parametrize(
    ("fields", "message", "field"),
    [
        ({"category": "conversation", "thread_id": None}, "needs a 'thread_id'", "thread_id"),
        ({"category": "conversation", "thread_id": ""}, "needs a 'thread_id'", "thread_id"),
        (
            {"category": "conversation", "thread_id": None, "category_changed": True},
            "needs a 'thread_id'",
            "category",
        ),
        (
            {"category": "core", "thread_id": None, "scope": "user", "has_agent": True},
            "A user memory has no agent ('agent' must be null)",
            "agent",
        ),
        (
            {"category": "core", "thread_id": None, "scope": "user"},
            "A user-scoped memory needs a 'subject_id'",
            "subject_id",
        ),
        (
            {"category": "workspace", "thread_id": None, "scope": "user", "subject_id": "s"},
            "A user-scoped memory cannot be a workspace memory",
            "category",
        ),
        (
            {"category": "conversation", "thread_id": "t", "scope": "user", "subject_id": "s"},
            "A user-scoped memory cannot be a conversation memory",
            "category",
        ),
        (
            {"category": "workspace", "thread_id": None, "scope": "agent", "has_agent": True},
            "A workspace memory has no agent ('agent' must be null)",
            "agent",
        ),
        (
            {"category": "core", "thread_id": None, "scope": "agent", "has_agent": False},
            "A memory without an agent must be in the 'workspace' category",
            "agent",
        ),
    ],
)
def test_the_rule_function_names_the_field_at_fault(fields, message, field):
    with pytest.raises(InvalidInput) as exc:
        inputs.memory_fields_check(**fields)
    assert message in exc.value.message and exc.value.details == {"field": field}


@pytest.mark.parametrize(
    "fields",
    [
        {"category": "conversation", "thread_id": "t-1"},
        {"category": "core", "thread_id": None, "scope": "user", "subject_id": "s"},
        # A rule is checked only when its fields are given: scope unknown, owner derived.
        {"category": "workspace", "thread_id": None, "scope": None, "has_agent": True},
        {"category": "core", "thread_id": None, "scope": "agent"},
        {"category": "workspace", "thread_id": None, "scope": "agent", "has_agent": False},
    ],
)
def test_the_rule_function_passes_a_memory_that_meets_every_rule(fields):
    inputs.memory_fields_check(**fields)


def test_a_store_asks_the_rule_function(api_client, agent, rule_calls):
    response = api_client.post(
        "/api/v1/memories", {"text": "hi", "category": "conversation"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "A conversation memory needs a 'thread_id'",
        "details": {"field": "thread_id"},
    }
    assert rule_calls[-1][1] == "A conversation memory needs a 'thread_id'"
    user = api_client.post(
        "/api/v1/memories", {"text": "hi", "scope": "user", "category": "daily"}, format="json"
    )
    assert user.json()["error"]["message"] == "A user-scoped memory needs a 'subject_id'"
    assert rule_calls[-1] == (
        {"category": "daily", "thread_id": None, "scope": "user", "subject_id": None},
        "A user-scoped memory needs a 'subject_id'",
    )


def test_a_patch_asks_the_rule_function(api_client, agent, rule_calls):
    memory = _store(agent, text="No thread here")
    response = api_client.patch(
        f"/api/v1/memories/{memory.pk}", {"category": "conversation"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "A conversation memory needs a 'thread_id'",
        "details": {"field": "category"},
    }
    assert rule_calls[-1][0]["category_changed"] is True
    user = _store(agent, text="A fact of hers", scope="user", subject_id="alice", thread_id="t-1")
    response = api_client.patch(
        f"/api/v1/memories/{user.pk}?subject_id=alice", {"category": "conversation"}, format="json"
    )
    assert response.json()["error"] == {
        "code": "INVALID_INPUT",
        "message": "A user-scoped memory cannot be a conversation memory",
        "details": {"field": "category"},
    }
    assert Memory.objects.get(pk=user.pk).category == "core"


def test_a_console_correction_asks_the_rule_function(tenant, agent, rule_calls):
    memory = _store(agent, text="No thread here")
    with pytest.raises(InvalidInput) as exc:
        memory_correct(
            tenant=tenant,
            memory_id=memory.pk,
            actor="operator:o@acme.test",
            changes={"category": "conversation"},
            expected_version=memory.version,
        )
    assert (exc.value.message, exc.value.details) == (
        "A conversation memory needs a 'thread_id'",
        {"field": "category"},
    )
    assert rule_calls[-1][1] == "A conversation memory needs a 'thread_id'"
    assert Memory.objects.get(pk=memory.pk).category == "core"


def test_a_jsonl_import_asks_the_rule_function(tenant, agent, rule_calls):
    line = {
        "id": NEW_ID,
        "agent": None,
        "category": "conversation",
        "thread_id": "t-1",
        "scope": "user",
        "subject_id": "alice",
        "text": "Imported",
        "status": "active",
    }
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, actor="operator:t", lines=["", json.dumps(line)])
    assert (exc.value.line, exc.value.message) == (
        2,
        "A user-scoped memory cannot be a conversation memory",
    )
    assert rule_calls[-1][0]["has_agent"] is False
    assert not Memory.objects.filter(pk=NEW_ID).exists()


def _row(tenant, agent, **fields):
    return Memory(tenant=tenant, agent=agent, created_by="agent:x", text="t", **fields)


@pytest.mark.parametrize("thread_id", [None, ""])
@pytest.mark.parametrize("status", ["active", "tombstoned"])
def test_the_database_refuses_a_conversation_memory_without_a_thread(
    tenant, agent, thread_id, status
):
    with pytest.raises(IntegrityError, match="memory_conversation_thread"), transaction.atomic():
        _row(tenant, agent, category="conversation", thread_id=thread_id, status=status).save()
    _row(tenant, agent, category="conversation", thread_id="t-1", status=status).save()
    _row(tenant, agent, category="core", thread_id=thread_id, status=status).save()


def test_the_database_refuses_clearing_a_conversation_memorys_thread(tenant, agent):
    memory = _store(agent, text="Said in t-1", category="conversation", thread_id="t-1")
    with (
        pytest.raises(IntegrityError, match="memory_conversation_thread"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute("UPDATE memories_memory SET thread_id = NULL WHERE id = %s", [memory.pk])
    assert Memory.objects.get(pk=memory.pk).thread_id == "t-1"

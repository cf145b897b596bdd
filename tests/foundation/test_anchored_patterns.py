"""Every value checked against a pattern is matched whole: a trailing newline is refused.
(`$` also matches just before a final "\\n", so `^…$` with `match` admitted `core\\n`, a kind
named `Evil\\n` and its MCP tool `create_evil\\n`.)"""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts import keys
from accounts.models import Agent, validate_retention
from memories import idempotency, validation
from memories.ids import is_memory_id, new_memory_id
from memories.models import Kind, Memory
from memories.services.policies import agent_policy_set, tenant_policy_set
from memoryhub.durations import parse_duration
from memoryhub.errors import InvalidInput
from memoryhub.middleware import body_limit

KIND = {"cardinality": "multiple", "memory_type": "semantic", "description": "A pet"}


@pytest.fixture
def admin(key_client, agent):
    return key_client(agent, scopes=["read", "write", "admin"])


def _invalid(response, field: str) -> None:
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "INVALID_INPUT"
    assert response.json()["error"]["details"]["field"] == field


@pytest.mark.django_db
def test_a_kind_named_with_a_trailing_newline_is_refused(admin):
    _invalid(admin.put("/api/v1/kinds/Evil%0A", KIND, format="json"), "name")
    assert not Kind.objects.filter(name__startswith="Evil").exists()
    assert admin.put("/api/v1/kinds/Evil", KIND, format="json").status_code == 201


@pytest.mark.django_db
def test_a_kinds_default_category_with_a_trailing_newline_is_refused(admin):
    body = {**KIND, "default_category": "core\n"}
    _invalid(admin.put("/api/v1/kinds/Pet", body, format="json"), "default_category")


@pytest.mark.parametrize(
    ("field", "value"), [("category", "core\n"), ("kind", "fact\n"), ("category", "notes\n")]
)
@pytest.mark.django_db
def test_a_stored_category_or_kind_with_a_trailing_newline_is_refused(admin, field, value):
    response = admin.post("/api/v1/memories", {"text": "A fact", field: value}, format="json")
    _invalid(response, field)
    assert not Memory.objects.exists()


def test_a_tags_trailing_newline_is_trimmed_as_any_white_space():
    assert validation.tags(["urgent\n", "crm\n"]) == ["urgent", "crm"]


@pytest.mark.django_db
def test_an_agents_categories_and_a_tenants_retention_refuse_a_trailing_newline(tenant, agent):
    with pytest.raises(InvalidInput):
        agent_policy_set(tenant=tenant, agent=agent, default_category="core\n")
    with pytest.raises(InvalidInput):
        agent_policy_set(tenant=tenant, agent=agent, extraction_categories=["core\n"])
    with pytest.raises(InvalidInput):
        tenant_policy_set(tenant=tenant, max_retention={"daily\n": 3600})
    with pytest.raises(ValidationError):
        validate_retention({"daily\n": 3600})
    agent.refresh_from_db()
    assert agent.default_category == "core"


@pytest.mark.django_db
def test_an_agent_slug_with_a_trailing_newline_fails_validation(tenant):
    """What a JSONL import (and every `full_clean`) checks an agent it creates against."""
    with pytest.raises(ValidationError):
        Agent(tenant=tenant, slug="bot\n", name="bot").full_clean(exclude=["tenant", "reads_from"])
    Agent(tenant=tenant, slug="bot", name="bot").full_clean(exclude=["tenant", "reads_from"])


def test_an_api_key_memory_id_or_idempotency_key_with_a_trailing_newline_is_refused():
    raw = keys.generate_key()
    assert keys.is_well_formed(raw) and not keys.is_well_formed(raw + "\n")
    memory_id = new_memory_id()
    assert is_memory_id(memory_id) and not is_memory_id(memory_id + "\n")
    assert idempotency.clean_key("retry-1") == "retry-1"
    with pytest.raises(InvalidInput):
        idempotency.clean_key("retry-1\n")


def test_only_the_messages_path_itself_gets_the_larger_body_limit(settings):
    messages = body_limit("/api/v1/threads/t-1/messages")
    assert messages == settings.MEMORYHUB_MAX_MESSAGES_BODY_BYTES
    assert body_limit("/api/v1/threads/t-1/messages\n") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_duration_keeps_allowing_the_white_space_around_it():
    """Its pattern admits surrounding white space on purpose: `7d\\n` is 7 days, as `7d `."""
    assert parse_duration(" 7d\n") == parse_duration("7d")
    with pytest.raises(ValueError, match="Use an integer and a unit"):
        parse_duration("7d\nx")

"""The JSONL import service's three steps, each naming the file's line at fault: parse (a line
into an `ImportLine`), check (the rules of a stored memory), apply (the agent it names, created
by `accounts.services.agent_create`, and the write). The console's Import, the round trip and
every field rule: tests/console/test_export.py."""

from __future__ import annotations

import json

import pytest

from accounts.models import Agent
from accounts.services import agent_create
from memories.models import Memory, MemoryRevision
from memories.services.jsonl_import import ImportLine, ImportLineError, jsonl_import, jsonl_parse
from memoryhub.errors import InvalidInput

pytestmark = pytest.mark.django_db

IDS = [f"mem_01ARZ3NDEKTSV4RRFFQ69G5FA{n}" for n in range(1, 4)]


def _line(memory_id: str, **fields) -> str:
    record = {
        "id": memory_id,
        "agent": "support-bot",
        "category": "core",
        "text": "Imported fact",
        "status": "active",
        "created_by": "agent:support-bot",
        **fields,
    }
    return json.dumps(record)


def test_parse_gives_each_line_with_its_number_and_normalised_fields():
    parsed = jsonl_parse(["", _line(IDS[0], tags=["VIP"]).encode(), "  ", _line(IDS[1])])
    assert [type(p) for p in parsed] == [ImportLine, ImportLine]
    assert [p.number for p in parsed] == [2, 4]  # blank lines count, and are skipped
    assert parsed[0].fields["tags"] == ["vip"]
    assert parsed[1].fields["id"] == IDS[1]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes)"),
        ("[1, 2]", "each line must be a JSON object"),
        (_line(IDS[0]), "the same memory id appears twice"),
        (_line(IDS[1], status="gone"), "status: unknown status"),
    ],
)
def test_parse_names_the_bad_line(bad, message):
    with pytest.raises(ImportLineError) as exc:
        jsonl_parse([_line(IDS[0]), "", bad])
    assert (exc.value.line, exc.value.message) == (3, message)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"scope": "user", "subject_id": "alice"},
            "A user memory has no agent ('agent' must be null)",
        ),
        ({"category": "conversation"}, "A conversation memory needs a 'thread_id'"),
        ({"created_by": ""}, "created_by: This field cannot be blank."),  # the model's validators
    ],
)
def test_check_names_the_line_and_nothing_is_applied(tenant, agent, fields, message):
    lines = [_line(IDS[0]), "", _line(IDS[1], **fields)]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, actor="operator:t", lines=lines)
    assert (exc.value.line, exc.value.message) == (3, message)
    assert not Memory.objects.filter(pk__in=IDS).exists()
    assert not MemoryRevision.objects.filter(memory_id__in=IDS).exists()


def test_apply_creates_the_agents_a_file_names_through_the_accounts_service(tenant, agent):
    lines = [_line(IDS[0], agent="sales-bot"), _line(IDS[1], agent="sales-bot")]
    result = jsonl_import(tenant=tenant, actor="operator:t", lines=lines)
    assert result.created == 2
    sales = Agent.objects.for_tenant(tenant).get(slug="sales-bot")
    assert sales.name == "sales-bot"
    assert set(Memory.objects.filter(pk__in=IDS).values_list("agent", flat=True)) == {sales.pk}


def test_apply_names_the_line_of_an_agent_slug_it_cannot_create(tenant, agent):
    lines = [_line(IDS[0], agent="new-bot"), _line(IDS[1], agent="Not A Slug")]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, actor="operator:t", lines=lines)
    assert (exc.value.line, exc.value.message) == (2, "invalid agent slug")
    # All or nothing: line 1's agent and memory are rolled back with the rest.
    assert not Agent.objects.for_tenant(tenant).filter(slug="new-bot").exists()
    assert not Memory.objects.filter(pk__in=IDS).exists()


@pytest.mark.parametrize("slug", [["support-bot"], {"slug": "support-bot"}, 7])
def test_an_agent_that_is_not_a_string_is_the_lines_error(tenant, agent, slug):
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, actor="operator:t", lines=[_line(IDS[0], agent=slug)])
    assert (exc.value.line, exc.value.message) == (1, "invalid agent slug")
    assert not Memory.objects.filter(pk=IDS[0]).exists()


def test_apply_names_the_line_whose_write_fails(tenant, agent):
    lines = [_line(IDS[0], key="hours"), _line(IDS[1]), _line(IDS[2], key="hours")]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, actor="operator:t", lines=lines)
    assert (exc.value.line, exc.value.message) == (
        3,
        "key 'hours' is already held by a live memory of the same owner and subject",
    )
    assert not Memory.objects.filter(pk__in=IDS).exists()


def test_agent_create_refuses_a_slug_the_model_refuses(tenant):
    with pytest.raises(InvalidInput) as exc:
        agent_create(tenant=tenant, slug="Not A Slug")
    assert exc.value.details == {"field": "slug"}
    assert not Agent.objects.for_tenant(tenant).exists()
    made = agent_create(tenant=tenant, slug="helper", name="Helper")
    assert (made.slug, made.name, made.tenant_id) == ("helper", "Helper", tenant.pk)

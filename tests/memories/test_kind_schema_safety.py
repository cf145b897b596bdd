"""A kind's schema cannot stall a worker nor make later stores fail: patterns on RE2 (linear
time), `uniqueItems` in one pass, a budget on every check, schemas whose references resolve and
do not loop refused at registration otherwise, and the re-check of stored data in batches that
leave the rest of the service answering."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections
from django.db.models import F
from rest_framework.test import APIClient

from accounts.models import Tenant
from memories import kind_checks, kind_registry
from memories.models import Kind, Memory
from tests.factories import make_agent, make_key, make_tenant, seed_synthetic

DOCS = Path(__file__).resolve().parents[2] / "docs"
HOSTILE = [
    # (pattern, a hostile string, whether it matches)
    (r"^(a+)+$", "a" * 50 + "!", False),
    (r"(a|aa)+$", "a" * 50 + "!", False),
    (r"^(\w+\s?)*$", "aaaaaaaaaa bbbbbbbbbb cccccccccc dddddddddd eeeeee!", False),
    (r"^(a+)+$", "a" * 60, True),
]


def client_for(agent, *scopes) -> APIClient:
    _, raw = make_key(agent, scopes=list(scopes or ("read", "write")))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def put_kind(client, name, schema):
    return client.put(f"/api/v1/kinds/{name}", {"schema": schema}, format="json")


@pytest.fixture
def timed_store(monkeypatch):
    """A store over REST, and the seconds its checks of `data` against the kind's schema took
    (`kind_registry.check_data`, which every store path calls; the request's own time is the rest)."""
    spent = []
    check = kind_registry.check_data

    def timed_check(rule, data):
        started = time.perf_counter()
        try:
            return check(rule, data)
        finally:
            spent.append(time.perf_counter() - started)

    monkeypatch.setattr(kind_registry, "check_data", timed_check)

    def store(client, **body):
        spent.clear()
        response = client.post("/api/v1/memories", body, format="json")
        assert spent, "the store did not check its data"
        return response, max(spent)

    return store


def schema_error(response) -> dict:
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"]["field"] == "schema"
    return error


@pytest.fixture
def admin(agent):
    return client_for(agent, "read", "write", "admin")


@pytest.mark.django_db
@pytest.mark.parametrize(("pattern", "text", "matches"), HOSTILE)
def test_a_hostile_pattern_is_answered_at_once(
    api_client, admin, timed_store, pattern, text, matches
):
    """Backtracking `re` takes seconds to hours on these (doubling per character); RE2 is
    linear in the text."""
    assert put_kind(admin, "Probe", {"properties": {"s": {"pattern": pattern}}}).status_code == 201
    response, seconds = timed_store(api_client, kind="Probe", text="probe", data={"s": text})
    assert response.status_code == (201 if matches else 400)
    assert seconds < 0.05
    if not matches:
        assert response.json()["error"]["details"]["errors"][0]["path"] == "/s"


@pytest.mark.django_db
@pytest.mark.parametrize(("pattern", "text", "matches"), HOSTILE[:3])
def test_hostile_property_names_meet_pattern_properties_at_once(
    api_client, admin, timed_store, pattern, text, matches
):
    """`patternProperties` and `additionalProperties: false` look at every key with every
    pattern: on RE2 too."""
    schema = {"patternProperties": {pattern: {"type": "integer"}}, "additionalProperties": False}
    assert put_kind(admin, "Probe", schema).status_code == 201
    response, seconds = timed_store(api_client, kind="Probe", text="probe", data={text: 1})
    assert response.status_code == 400 and seconds < 0.05


def test_patterns_are_searched_not_anchored_and_ecma_escapes_work():
    assert kind_checks.matches("b+", "abbbc") and not kind_checks.matches("^b", "ab")
    assert kind_checks.matches(r"^[\u00C0-\u017F]+$", "ÉÀÇ")
    assert not kind_checks.matches(r"^\d+$", "١٢٣")  # ECMA's \d is ASCII, RE2's too
    assert kind_checks.matches("^a$", "a") and not kind_checks.matches("^a$", "a\n")


@pytest.mark.django_db
def test_unique_items_over_five_thousand_objects_is_linear(api_client, admin, timed_store):
    schema = {"properties": {"rows": {"type": "array", "uniqueItems": True}}}
    assert put_kind(admin, "Table", schema).status_code == 201
    rows = [{"i": i} for i in range(5000)]
    data = {"rows": rows}
    assert len(json.dumps(data, separators=(",", ":"))) < 64 * 1024
    unique, seconds = timed_store(api_client, kind="Table", text="table", data=data)
    assert unique.status_code == 201 and seconds < 0.2
    duplicate = {"rows": [*rows[:-1], {"i": 0.0}]}  # 0.0 == 0: the same JSON value
    refused, seconds = timed_store(api_client, kind="Table", text="table", data=duplicate)
    assert refused.status_code == 400 and seconds < 0.2
    assert refused.json()["error"]["details"]["errors"][0]["path"] == "/rows"


@pytest.mark.parametrize(
    ("items", "unique"),
    [
        ([1, 1.0], False),
        ([True, 1], True),
        ([False, 0, None, ""], True),
        ([{"a": 1, "b": 2}, {"b": 2, "a": 1.0}], False),
        ([[True], [1]], True),
        ([[1, 2], [2, 1]], True),
        ([{"a": [1, {"b": False}]}, {"a": [1.0, {"b": False}]}], False),
        ([{"a": True}, {"a": 1}], True),
        (["1", 1], True),
    ],
)
def test_unique_items_has_json_schema_equality(items, unique):
    validator = kind_checks.validator_for({"uniqueItems": True})
    assert validator.is_valid(items) is unique
    # The library's own (quadratic) check agrees.
    assert kind_checks.Draft202012Validator({"uniqueItems": True}).is_valid(items) is unique


UNEVALUATED = {
    "$defs": {"base": {"properties": {"id": {"type": "integer"}}}},
    "allOf": [{"$ref": "#/$defs/base"}],
    "properties": {"name": {"type": "string"}},
    "patternProperties": {"^x-": {}},
    "dependentSchemas": {"a": {"properties": {"b": {}}}},
    "if": {"required": ["kind"]},
    "then": {"properties": {"kind": {"const": "k"}}},
    "unevaluatedProperties": False,
}
UNEVALUATED_ITEMS = {
    "prefixItems": [{"type": "integer"}],
    "anyOf": [{"contains": {"type": "string"}}, {"prefixItems": [{}, {"type": "boolean"}]}],
    "unevaluatedItems": False,
}


@pytest.mark.parametrize(
    ("schema", "instance"),
    [
        (UNEVALUATED, {"id": 1, "name": "n"}),
        (UNEVALUATED, {"id": 1, "x-a": 2, "zzz": 3}),
        (UNEVALUATED, {"a": 1, "b": 2}),
        (UNEVALUATED, {"b": 2}),
        (UNEVALUATED, {"kind": "k"}),
        (UNEVALUATED, {"x-kind": 1, "y-kind": 1}),
        (UNEVALUATED_ITEMS, [1, "s", "t"]),
        (UNEVALUATED_ITEMS, [1, True]),
        (UNEVALUATED_ITEMS, [1, 2, 3]),
        (UNEVALUATED_ITEMS, [1, True, 5]),
    ],
)
def test_unevaluated_keywords_agree_with_the_library(schema, instance):
    """`unevaluatedProperties`/`unevaluatedItems` are rewritten (sets, RE2): same answers."""
    ours = kind_checks.validator_for(schema)
    theirs = kind_checks.Draft202012Validator(schema)
    assert ours.is_valid(instance) is theirs.is_valid(instance)
    assert [e.message for e in ours.iter_errors(instance)] == [
        e.message for e in theirs.iter_errors(instance)
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("schema", "pointer", "words"),
    [
        # `$id` moves the base of `#/$defs/x` to a document that has none: every store failed.
        (
            {
                "properties": {"p": {"$id": "http://h/sub", "$ref": "#/$defs/x"}},
                "$defs": {"x": {"type": "string"}},
            },
            "/properties/p/$ref",
            "does not resolve",
        ),
        ({"allOf": [{"$ref": "#"}]}, "/allOf/0", "loops back"),
        (
            {
                "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}},
                "properties": {"x": {"$ref": "#/$defs/a"}},
            },
            "/$defs/",
            "loops back",
        ),
        ({"properties": {"p": {"pattern": r"(a)\1"}}}, "/properties/p/pattern", "linear-time"),
        ({"patternProperties": {"(?=a)": {}}}, "/patternProperties/(?=a)", "linear-time"),
        (
            {"properties": {"p": {"$schema": "http://json-schema.org/draft-07/schema#"}}},
            "/properties/p",
            "$schema",
        ),
        ({"properties": {"p": {"$ref": "#/required"}}, "required": ["p"]}, "/required", "not one"),
        ({"properties": {"p": {"pattern": "[\\p{L}]{1000}"}}}, "/properties/p/pattern", "large"),
    ],
)
def test_schemas_that_would_fail_later_stores_are_refused(admin, schema, pointer, words):
    error = schema_error(put_kind(admin, "Broken", schema))
    [found] = error["details"]["errors"]
    assert found["path"].startswith(pointer) and words in error["message"]
    assert not Kind.objects.filter(name="Broken").exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("schema", "limit"),
    [
        (json.loads('{"not":' * 26 + "{}" + "}" * 26), "deeper than 24"),
        ({"properties": {f"p{i}": {} for i in range(501)}}, "more than 500 subschemas"),
        ({f"x-{i}": 0 for i in range(5001)}, "more than 5000 keywords"),
        (
            {"properties": {f"p{i}": {"pattern": f"^{i}$"} for i in range(201)}},
            "more than 200 patterns",
        ),
        ({"description": "x" * 70_000}, "larger than 65536 bytes"),
    ],
)
def test_schema_limits_are_refused_naming_the_limit(admin, schema, limit):
    assert limit in put_kind(admin, "Huge", schema).json()["error"]["message"]


def _expensive(levels: int, leaf: str = "array") -> dict:
    """`$defs` whose evaluation doubles at each level (a DAG, no loop), reached only for
    arrays: `{}` and the registration's samples never run it."""
    defs = {
        f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": leaf}  # passed by what reaches it: every branch is run
    return {
        "properties": {"x": {"if": {"type": "array"}, "then": {"$ref": "#/$defs/d0"}}},
        "$defs": defs,
    }


@pytest.mark.django_db
def test_a_check_over_its_budget_is_invalid_input_not_a_500(api_client, admin, timed_store):
    assert put_kind(admin, "Costly", _expensive(16)).status_code == 201
    response, seconds = timed_store(api_client, kind="Costly", text="c", data={"x": []})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and "budget" in error["message"]
    assert error["details"]["limit_steps"] == settings.MEMORYHUB_KIND_CHECK_STEPS
    assert seconds < 2
    assert timed_store(api_client, kind="Costly", text="c", data={"x": "s"})[0].status_code == 201
    # Exercised at registration, one that is too costly even for `{}` is refused there.
    root_costly = {**_expensive(16, leaf="object"), "properties": {}, "$ref": "#/$defs/d0"}
    assert "budget" in schema_error(put_kind(admin, "Costly2", root_costly))["message"]


@pytest.mark.django_db
def test_a_stored_schema_the_checks_would_refuse_answers_400_not_500(api_client, tenant):
    """A schema stored before these checks (written here straight into the table) that makes
    the validator raise: the store is refused with INVALID_INPUT, never a 500."""
    Kind.objects.create(
        tenant=tenant,
        name="Legacy",
        cardinality="multiple",
        memory_type="semantic",
        schema={
            "properties": {"p": {"$id": "http://h/sub", "$ref": "#/$defs/x"}},
            "$defs": {"x": {"type": "string"}},
        },
    )
    Tenant.objects.filter(pk=tenant.pk).update(kinds_version=F("kinds_version") + 1)
    response = api_client.post(
        "/api/v1/memories", {"kind": "Legacy", "text": "x", "data": {"p": "a"}}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and "cannot be evaluated" in error["message"]
    assert not Memory.objects.filter(kind="Legacy").exists()


def _doc_schemas() -> list[tuple[str, dict]]:
    """The JSON schemas shown in docs/*.md: each `"schema": {…}` of a JSON block."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for block in re.findall(r"```(?:json|console)\n(.*?)```", page.read_text(), re.S):
            for match in re.finditer(r'"schema":\s*', block):
                try:
                    schema, _ = json.JSONDecoder().raw_decode(block[match.end() :])
                except ValueError:
                    continue
                if isinstance(schema, dict):
                    found.append((page.name, schema))
    return found


@pytest.mark.django_db
def test_built_in_and_documented_schemas_are_still_accepted():
    schemas = [kind["schema"] for kind in kind_registry.BUILTIN_KINDS if kind["schema"] is not None]
    documented = _doc_schemas()
    assert any("pattern" in json.dumps(schema) for _, schema in documented)
    for schema in [*schemas, *(schema for _, schema in documented)]:
        kind_registry.check_schema(schema)


@pytest.mark.django_db(transaction=True)
def test_a_schema_change_over_ten_thousand_memories_leaves_the_service_answering():
    """The re-check holds the kind's lock while it reads the stored memories in batches: paused
    after its first batch (the progress line), a read and a store of another kind are answered
    before it ends; it then checks all 10,000, a log line a batch."""
    agent = make_agent(make_tenant("acme"), "support-bot")
    admin = client_for(agent, "read", "write", "admin")
    reader = client_for(agent)
    other_agent = client_for(make_agent(agent.tenant, "billing-bot"))
    assert put_kind(admin, "Ticket", {"type": "object"}).status_code == 201
    mine = reader.post(
        "/api/v1/memories",
        {"text": "Ticket one", "kind": "Ticket", "data": {"n": "xTICKET"}},
        format="json",
    )
    seed_synthetic(
        agent.tenant,
        [agent],
        10_000,
        kind="Ticket",
        data=lambda i: {"n": f"x{i:06d}", "tags": [1, 2]},
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")
    total = Memory.objects.filter(kind="Ticket", status="active").count()
    assert total > 10_000

    first_batch, proceed, finished = threading.Event(), threading.Event(), threading.Event()
    lines: list[str] = []

    class Pause(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
            if not first_batch.is_set():
                first_batch.set()
                proceed.wait(timeout=30)

    outcome = {}

    def change():
        try:
            started = time.perf_counter()
            schema = {
                "type": "object",
                "properties": {
                    "n": {"type": "string", "pattern": "^x[0-9A-Z]{6}$"},
                    "tags": {"type": "array", "uniqueItems": True},
                },
                "required": ["n"],
            }
            outcome["response"] = put_kind(admin, "Ticket", schema)
            outcome["seconds"] = time.perf_counter() - started
        finally:
            finished.set()
            connections.close_all()

    logger = logging.getLogger("memories.services.kind_changes")
    handler, level = Pause(level=logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    thread = threading.Thread(target=change)
    try:
        thread.start()
        assert first_batch.wait(timeout=60)
        read = reader.get(f"/api/v1/memories/{mine.json()['memory_id']}")
        other = other_agent.post("/api/v1/memories", {"text": "Another kind"}, format="json")
        listed = reader.get("/api/v1/kinds")
        assert not finished.is_set()  # all three answered while the change holds its lock
        assert read.status_code == 200 and other.status_code == 201 and listed.status_code == 200
    finally:
        proceed.set()
        thread.join(timeout=120)
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert outcome["response"].status_code == 200, outcome["response"].json()
    assert outcome["seconds"] < 60
    assert len(lines) == -(-total // 1000)
    assert lines[0].endswith(f"1000/{total}") and lines[-1].endswith(f"{total}/{total}")

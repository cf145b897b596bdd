"""The kind registry (docs/memory-model.md#kinds) through REST: built-ins, JSON Schema checks with
JSON-pointer paths, refused schema changes and deletes, `single` kinds replaced on store."""

from __future__ import annotations

import threading

import pytest
from django.db import connections
from rest_framework.test import APIClient

from accounts.principal import Principal
from memories import kind_registry
from memories.models import Kind, Memory, MemoryRevision
from memories.serialization import kind_json
from memories.services.store import memory_store, memory_store_prepare, memory_store_write
from tests.factories import make_agent, make_key, make_tenant

PROFILE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "favoriteColor": {"type": "string", "enum": ["red", "green", "blue"]},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
    "required": ["name"],
}


def admin_client(agent) -> APIClient:
    _, raw = make_key(agent, scopes=["read", "write", "admin"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def store(client, **body):
    return client.post("/api/v1/memories", body, format="json")


def put_kind(client, name, **definition):
    return client.put(f"/api/v1/kinds/{name}", definition, format="json")


@pytest.mark.django_db
def test_every_new_tenant_starts_with_the_built_in_kinds():
    """The trigger of memories/sql/builtin_kinds.sql writes what `kinds.BUILTIN_KINDS` says, for
    every tenant however it is created."""
    tenant = make_tenant("fresh")
    rows = [
        {
            "name": k.name,
            "cardinality": k.cardinality,
            "memory_type": k.memory_type,
            "description": k.description,
            "schema": k.schema,
            "default_category": k.default_category,
        }
        for k in Kind.objects.for_tenant(tenant).order_by("name")
    ]
    assert rows == sorted(kind_registry.BUILTIN_KINDS, key=lambda k: k["name"])


@pytest.mark.django_db
def test_list_and_get_kinds_over_rest(api_client, other_tenant):
    listed = api_client.get("/api/v1/kinds").json()
    assert listed["ok"] is True
    names = [k["name"] for k in listed["kinds"]]
    assert names == ["AgentInstructions", "InteractionLog", "UserProfile", "fact"]
    profile = api_client.get("/api/v1/kinds/UserProfile").json()["kind"]
    assert profile["cardinality"] == "single" and profile["memory_type"] == "semantic"
    assert profile["default_category"] == "core" and profile["tool"] == "create_user_profile"
    assert api_client.get("/api/v1/kinds/fact").json()["kind"]["tool"] is None
    # Another tenant's kind is as missing as one that does not exist.
    admin_client(make_agent(other_tenant, "globex-bot"))
    put_kind(admin_client(make_agent(other_tenant, "b")), "Invoice", cardinality="multiple")
    assert api_client.get("/api/v1/kinds/Invoice").status_code == 404
    assert api_client.get("/api/v1/kinds/Nothing").json()["error"]["code"] == "NOT_FOUND"


@pytest.mark.django_db
def test_kind_writes_need_the_admin_scope(api_client, agent):
    denied = put_kind(api_client, "Invoice", cardinality="multiple")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "SCOPE_DENIED"
    assert api_client.delete("/api/v1/kinds/fact").status_code == 403
    admin = admin_client(agent)
    created = put_kind(admin, "Invoice", description="An invoice the customer received.")
    assert created.status_code == 201
    assert created.json()["kind"]["cardinality"] == "multiple"
    again = put_kind(admin, "Invoice", cardinality="single", memory_type="episodic")
    assert again.status_code == 200 and again.json()["kind"]["cardinality"] == "single"
    assert admin.delete("/api/v1/kinds/Invoice").json() == {"ok": True, "deleted": True}
    assert admin.get("/api/v1/kinds/Invoice").status_code == 404


@pytest.mark.django_db
def test_a_kind_is_checked_as_a_json_schema_when_registered(agent):
    admin = admin_client(agent)
    bad = put_kind(admin, "Profile", schema={"type": "objectt"})
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"]["field"] == "schema"
    assert error["details"]["errors"][0]["path"] == "/type"
    not_object = put_kind(admin, "Profile", schema={"type": "string"})
    assert not_object.json()["error"]["details"]["field"] == "schema"
    remote = put_kind(admin, "Profile", schema={"$ref": "https://example.com/schema.json"})
    assert "within the schema" in remote.json()["error"]["message"]
    assert put_kind(admin, "bad name!").status_code == 400
    unknown = put_kind(admin, "Profile", cardinality="single", colour="red")
    assert unknown.json()["error"]["details"]["field"] == "colour"
    # A second kind whose MCP tool would be create_user_profile is refused.
    clash = put_kind(admin, "user_profile")
    assert clash.status_code == 400 and "create_user_profile" in clash.json()["error"]["message"]


@pytest.mark.django_db
def test_a_schema_violation_names_the_failing_path(api_client, agent):
    assert put_kind(admin_client(agent), "Profile", schema=PROFILE_SCHEMA).status_code == 201
    refused = store(
        api_client,
        kind="Profile",
        data={"name": "Ann", "favoriteColor": "purple", "address": {"zip": "1000"}},
    )
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"]["field"] == "data"
    assert [e["path"] for e in error["details"]["errors"]] == ["/address/city", "/favoriteColor"]
    assert "'city' is a required property" in error["details"]["errors"][0]["message"]
    assert "is not one of" in error["details"]["errors"][1]["message"]
    missing = store(api_client, kind="Profile", data={"favoriteColor": "red"})
    assert missing.json()["error"]["details"]["errors"] == [
        {"path": "/name", "message": "'name' is a required property"}
    ]
    assert not Memory.objects.exists()
    ok = store(api_client, kind="Profile", text="Ann's profile", data={"name": "Ann"})
    assert ok.status_code == 201
    # A PATCH is held to the schema too.
    memory_id = ok.json()["memory_id"]
    patched = api_client.patch(
        f"/api/v1/memories/{memory_id}", {"data": {"name": 7}}, format="json"
    )
    assert patched.json()["error"]["details"]["errors"][0]["path"] == "/name"
    assert (
        api_client.patch(
            f"/api/v1/memories/{memory_id}", {"kind": "fact", "data": {"name": 7}}, format="json"
        ).status_code
        == 200
    )


@pytest.mark.django_db
def test_a_schema_change_that_stored_data_would_break_is_refused(api_client, agent):
    admin = admin_client(agent)
    put_kind(admin, "Profile", schema=PROFILE_SCHEMA)
    first = store(api_client, kind="Profile", data={"name": "Ann"}).json()["memory_id"]
    second = store(api_client, kind="Profile", data={"name": "Bob", "favoriteColor": "red"})
    second = second.json()["memory_id"]
    stricter = {**PROFILE_SCHEMA, "required": ["name", "favoriteColor"]}
    refused = put_kind(admin, "Profile", schema=stricter)
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "CONFLICT" and error["details"]["memory_ids"] == [first]
    assert error["details"]["errors"][0]["path"] == "/favoriteColor"
    assert Kind.objects.get(name="Profile").schema == PROFILE_SCHEMA
    # Registering a schema over a free label checks what that label holds already.
    store(api_client, kind="Ticket", data={"priority": "high"})
    label = put_kind(admin, "Ticket", schema={"properties": {"priority": {"type": "integer"}}})
    assert label.status_code == 409
    # Once the offending memory is gone, the change goes through.
    api_client.delete(f"/api/v1/memories/{first}")
    assert put_kind(admin, "Profile", schema=stricter).status_code == 200
    assert api_client.get(f"/api/v1/memories/{second}").status_code == 200


@pytest.mark.django_db
def test_a_kind_in_use_cannot_be_deleted(api_client, agent):
    admin = admin_client(agent)
    put_kind(admin, "Invoice")
    ids = [
        store(api_client, kind="Invoice", text=f"Invoice {n}").json()["memory_id"] for n in (1, 2)
    ]
    refused = admin.delete("/api/v1/kinds/Invoice")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "CONFLICT"
    assert refused.json()["error"]["details"] == {"count": 2}
    for memory_id in ids:
        api_client.delete(f"/api/v1/memories/{memory_id}")
    assert admin.delete("/api/v1/kinds/Invoice").status_code == 200
    # Its name is a free label again: storing it still works, as a fact.
    assert store(api_client, kind="Invoice", text="Invoice 3").status_code == 201


@pytest.mark.django_db
def test_a_single_kind_is_replaced_on_store(api_client):
    created = store(api_client, kind="UserProfile", subject_id="ann", data={"name": "Ann"})
    assert created.status_code == 201
    body = created.json()
    assert body["action"] == "created" and body["memory"]["category"] == "core"
    replaced = store(
        api_client,
        kind="UserProfile",
        subject_id="ann",
        text="Ann, in Lisbon",
        data={"name": "Ann", "location": "Lisbon"},
    )
    assert replaced.status_code == 200
    again = replaced.json()
    assert again["action"] == "replaced" and again["message"] == "Updated"
    assert again["memory_id"] == body["memory_id"] and again["version"] == 2
    assert again["memory"]["data"] == {"name": "Ann", "location": "Lisbon"}
    # One per subject: Bob's is another record.
    bob = store(api_client, kind="UserProfile", subject_id="bob", data={"name": "Bob"})
    assert bob.json()["action"] == "created"
    assert Memory.objects.filter(kind="UserProfile", status="active").count() == 2
    history = MemoryRevision.objects.filter(memory_id=body["memory_id"]).order_by("version")
    assert [r.change_type for r in history] == ["create", "update"]
    assert history[1].before["data"] == {"name": "Ann"} and history[1].reason == "replaced"
    # Compare-and-set without a key names the one record.
    stale = store(
        api_client, kind="UserProfile", subject_id="ann", data={"name": "A"}, expected_version=1
    )
    assert stale.status_code == 409
    assert stale.json()["error"]["details"]["current_version"] == 2
    fresh = store(
        api_client, kind="UserProfile", subject_id="ann", data={"name": "A"}, expected_version=2
    )
    assert fresh.json()["action"] == "replaced" and fresh.json()["version"] == 3
    create_only = store(
        api_client, kind="UserProfile", subject_id="ann", data={"name": "A"}, expected_version=0
    )
    assert create_only.status_code == 409


@pytest.mark.django_db
def test_keyed_and_single_stores_agree(api_client):
    keyed = store(api_client, kind="AgentInstructions", key="rules", text="Be brief.")
    assert keyed.json()["action"] == "created"
    # The kind's one record, found by its key: a keyed upsert.
    updated = store(api_client, kind="AgentInstructions", key="rules", text="Be kind.")
    assert updated.json()["action"] == "updated"
    # Found by its kind, under another key: replaced, and re-keyed.
    rekeyed = store(api_client, kind="AgentInstructions", key="policy", text="Be fair.")
    assert rekeyed.json()["action"] == "replaced"
    assert rekeyed.json()["memory"]["key"] == "policy"
    # A key held by another memory than the kind's one record would leave two.
    store(api_client, key="tone", text="A fact under a key.")
    clash = store(api_client, kind="AgentInstructions", key="tone", text="Be terse.")
    assert clash.status_code == 409
    assert Memory.objects.filter(kind="AgentInstructions", status="active").count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_stores_of_a_single_kind_leave_one_record_with_both_revisions(tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    barrier = threading.Barrier(2)
    results, errors = [], []

    def write(name):
        try:
            barrier.wait()
            result = memory_store(
                principal=principal,
                data={"kind": "UserProfile", "subject_id": "ann", "data": {"name": name}},
            )
            results.append(result.action)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=write, args=(name,)) for name in ("Ann", "Anna")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(results) == ["created", "replaced"]
    [live] = Memory.objects.filter(kind="UserProfile", status="active")
    assert live.version == 2
    revisions = MemoryRevision.objects.filter(memory_id=live.pk).order_by("version")
    assert [(r.version, r.change_type) for r in revisions] == [(1, "create"), (2, "update")]
    assert {revisions[0].after["data"]["name"], live.data["name"]} == {"Ann", "Anna"}


@pytest.mark.django_db
def test_cardinality_changes_check_and_mark_the_stored_memories(api_client, agent):
    admin = admin_client(agent)
    put_kind(admin, "Plan")
    one = store(api_client, kind="Plan", text="Plan A", subject_id="ann").json()["memory_id"]
    two = store(api_client, kind="Plan", text="Plan B", subject_id="ann").json()["memory_id"]
    store(api_client, kind="Plan", text="Plan C", subject_id="bob")
    refused = put_kind(admin, "Plan", cardinality="single")
    assert refused.status_code == 409
    assert set(refused.json()["error"]["details"]["memory_ids"]) == {one, two}
    assert api_client.delete(f"/api/v1/memories/{one}?subject_id=ann").status_code == 200
    assert put_kind(admin, "Plan", cardinality="single").status_code == 200
    assert set(Memory.objects.filter(status="active").values_list("kind_single", flat=True)) == {
        True
    }
    replaced = store(api_client, kind="Plan", text="Plan D", subject_id="ann").json()
    assert replaced["action"] == "replaced" and replaced["memory_id"] == two
    assert put_kind(admin, "Plan", cardinality="multiple").status_code == 200
    assert not Memory.objects.filter(kind_single=True).exists()
    appended = store(api_client, kind="Plan", text="Plan E", subject_id="ann").json()
    assert appended["action"] == "created"


@pytest.mark.django_db
def test_patching_a_memory_into_a_taken_single_kind_is_a_conflict(api_client):
    store(api_client, kind="UserProfile", subject_id="ann", data={"name": "Ann"})
    other = store(api_client, text="Ann's other profile", subject_id="ann").json()["memory_id"]
    clash = api_client.patch(
        f"/api/v1/memories/{other}?subject_id=ann", {"kind": "UserProfile"}, format="json"
    )
    assert clash.status_code == 409 and clash.json()["error"]["details"]["field"] == "kind"


@pytest.mark.django_db
def test_a_kind_supplies_its_default_category(api_client):
    log = store(api_client, kind="InteractionLog", text="Called about billing.").json()
    assert log["memory"]["category"] == "daily"
    explicit = store(api_client, kind="InteractionLog", text="x", category="archival").json()
    assert explicit["memory"]["category"] == "archival"
    assert store(api_client, text="A fact.").json()["memory"]["category"] == "core"


def test_tool_names_are_snake_case():
    assert kind_registry.tool_name("UserProfile") == "create_user_profile"
    assert kind_registry.tool_name("AgentInstructions") == "create_agent_instructions"
    assert kind_registry.tool_name("HTTPRequestLog") == "create_http_request_log"
    assert kind_registry.tool_name("fact") == "create_fact"


@pytest.mark.django_db
def test_kind_json_is_what_rest_answers(api_client, tenant):
    kind = Kind.objects.for_tenant(tenant).get(name="UserProfile")
    assert api_client.get("/api/v1/kinds/UserProfile").json()["kind"] == kind_json(kind)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("cardinality", "action"), [("multiple", "skipped"), ("single", "replaced")]
)
def test_a_cardinality_changed_after_validation_decides_the_store(
    api_client, tenant, agent, cardinality, action
):
    """A store validated under one cardinality and written under the other: its look-alikes
    (sent with the kind guard for the cardinality it was validated with) are looked for again,
    so a kind no longer single finds its near duplicate, and one now single replaces its record."""
    admin = admin_client(agent)
    before = "single" if cardinality == "multiple" else "multiple"
    assert put_kind(admin, "Plan", cardinality=before).status_code in (200, 201)
    first = store(api_client, kind="Plan", text="Plan A", subject_id="ann").json()["memory_id"]
    me = Principal(tenant=tenant, agent=agent)
    prepared = memory_store_prepare(
        principal=me,
        data={
            "kind": "Plan",
            "text": "Plan A",
            "subject_id": "ann",
            "dedup_policy": "skip_if_near",
        },
    )
    assert put_kind(admin, "Plan", cardinality=cardinality).status_code == 200
    result = memory_store_write(prepared=prepared)
    assert result.action == action and result.memory.pk == first

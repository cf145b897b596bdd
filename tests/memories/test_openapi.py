"""The OpenAPI schema is valid, public, complete, and the API keeps to it (schemathesis)."""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.principal import Principal
from memories.services import memory_store
from memoryhub.wsgi import application
from tests.factories import make_agent, make_key

AGENT_OPERATIONS = {
    ("GET", "/api/v1/memories"),
    ("POST", "/api/v1/memories"),
    ("GET", "/api/v1/memories/{memory_id}"),
    ("PATCH", "/api/v1/memories/{memory_id}"),
    ("DELETE", "/api/v1/memories/{memory_id}"),
    ("POST", "/api/v1/memories/{memory_id}/confirm"),
    ("GET", "/api/v1/memories/by-key/{key}"),
    ("DELETE", "/api/v1/memories/by-key/{key}"),
    ("GET", "/api/v1/keys"),
    ("POST", "/api/v1/threads/{thread_id}/end"),
}


@pytest.mark.django_db
def test_schema_is_public_valid_and_complete(client):
    response = client.get("/api/schema/?format=json")
    assert response.status_code == 200
    document = response.json()
    schemathesis.openapi.from_dict(document).validate()  # against the OpenAPI 3.0 meta-schema
    operations = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if method in {"get", "post", "patch", "delete", "put"}
    }
    assert operations >= AGENT_OPERATIONS
    store = document["paths"]["/api/v1/memories"]["post"]
    assert set(store["responses"]) >= {"200", "201", "400", "401", "403", "409", "422", "503"}
    memory = document["components"]["schemas"]["Memory"]
    assert list(memory["properties"]) == [
        "id", "key", "category", "kind", "text", "data", "tags", "subject_id", "thread_id",
        "importance", "confidence", "capture_mode", "source_provider", "mentions", "expires_at",
        "last_confirmed_at", "created_at", "updated_at", "version", "status", "review_state",
        "size_bytes", "agent", "source",
    ]  # fmt: skip
    assert document["components"]["securitySchemes"]["BearerKey"]["scheme"] == "bearer"
    assert client.get("/api/docs/").status_code == 200


@pytest.fixture
def api_schema(db):
    # Like Django's test client: a request must not close the test's connection (and with it the
    # transaction the test runs in) when it finishes.
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    try:
        yield schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    finally:
        for signal in (request_started, request_finished):
            signal.connect(close_old_connections)


@pytest.fixture
def seeded_key(tenant):
    """An admin key whose agent already has a few memories (so ids and keys can hit)."""
    agent = make_agent(tenant, "fuzz-bot")
    principal = Principal(tenant=tenant, agent=agent, scopes=frozenset({"read", "write"}))
    for i, category in enumerate(("core", "daily", "workspace")):
        memory_store(
            principal=principal,
            data={"text": f"seed fact {i}", "key": f"seed-{i}", "category": category},
        )
    _, raw = make_key(agent, scopes=["read", "write", "admin"])
    return raw


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis_settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db
def test_api_keeps_to_its_schema(case, seeded_key):
    response = case.call(headers={"Authorization": f"Bearer {seeded_key}"})
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            response_headers_conformance,
        ],
    )

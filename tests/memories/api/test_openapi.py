"""The OpenAPI schema is valid, public, complete, and the API keeps to it (schemathesis)."""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

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
from memories import inputs, validation
from memories.formation.ingest import INGEST_FIELDS, MESSAGE_FIELDS, thread_messages_add
from memories.idempotency import KEY_RE as IDEMPOTENCY_KEY_RE
from memories.ids import MEMORY_ID_RE
from memories.retrieval.params import HYDRATE_FIELDS, SEARCH_FIELDS
from memories.services.store import memory_store
from memoryhub.errors import DomainError
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
    ("POST", "/api/v1/threads/{thread_id}/messages"),
    ("GET", "/api/v1/threads/{thread_id}/messages"),
    ("GET", "/api/v1/threads/{thread_id}"),
    ("POST", "/api/v1/threads/{thread_id}/extract"),
    ("DELETE", "/api/v1/subjects/{subject_id}"),
    ("GET", "/api/v1/kinds"),
    ("GET", "/api/v1/kinds/{name}"),
    ("PUT", "/api/v1/kinds/{name}"),
    ("DELETE", "/api/v1/kinds/{name}"),
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
        "id", "key", "category", "kind", "scope", "text", "data", "tags", "subject_id", "thread_id",
        "importance", "confidence", "capture_mode", "source_provider", "mentions", "occurred_at",
            "expires_at",
        "last_confirmed_at", "created_at", "updated_at", "version", "status", "review_state",
        "size_bytes", "agent", "source", "evidence",
    ]  # fmt: skip
    assert document["components"]["securitySchemes"]["BearerKey"]["scheme"] == "bearer"
    # Each operation explains itself (no description inherited from a base view).
    descriptions = [
        operation.get("description", "")
        for item in document["paths"].values()
        for method, operation in item.items()
        if method in {"get", "post", "patch", "delete", "put"}
    ]
    assert all(descriptions) and len(set(descriptions)) == len(descriptions)
    # Request bodies list exactly the fields the server accepts, and nothing else.
    schemas = document["components"]["schemas"]
    for name, accepted in (
        ("StoreRequestRequest", inputs.STORE_FIELDS),
        ("PatchedUpdateRequestRequest", inputs.UPDATE_FIELDS),
        ("SearchRequestRequest", SEARCH_FIELDS),
        ("HydrateRequestRequest", HYDRATE_FIELDS),
        ("IngestRequestRequest", INGEST_FIELDS),
        ("MessageInRequest", MESSAGE_FIELDS),
    ):
        assert set(schemas[name]["properties"]) == accepted, name
        assert schemas[name]["additionalProperties"] is False, name
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


# Operations whose success-response schema the fuzz run must actually exercise.
MUST_SUCCEED = {
    "POST /api/v1/memories",
    "GET /api/v1/memories/{memory_id}",
    "PATCH /api/v1/memories/{memory_id}",
    "POST /api/v1/memories/{memory_id}/confirm",
    "GET /api/v1/memories/by-key/{key}",
    "POST /api/v1/search",
    "POST /api/v1/hydrate",
    "POST /api/v1/threads/{thread_id}/messages",
    "GET /api/v1/threads/{thread_id}/messages",
    "GET /api/v1/threads/{thread_id}",
    "POST /api/v1/threads/{thread_id}/extract",
    "DELETE /api/v1/subjects/{subject_id}",
}


@dataclass
class Fuzzing:
    """The fuzzed agent, its key, and what each operation answered during the run."""

    principal: Principal
    raw_key: str
    statuses: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    cases: int = 0

    def prepare(self, case) -> None:
        """Make a generated request reach the code behind the validation.

        A well-formed memory id is made to exist (a random ULID never does, and only a real
        memory reaches the success schema); a malformed one stays as generated and must answer
        404. A well-formed Idempotency-Key is made unique to its case: generators repeat short
        values such as "0", and a reused key with another body is only ever 422 (reuse itself
        is tested in test_concurrency). A thread named in the path is made to exist for its
        subject (a message in it), so thread reads and `/extract` reach their success schemas."""
        self.cases += 1
        memory_id = (case.path_parameters or {}).get("memory_id")
        if isinstance(memory_id, str) and MEMORY_ID_RE.fullmatch(memory_id):
            stored = memory_store(principal=self.principal, data={"text": "fuzz target fact"})
            case.path_parameters["memory_id"] = stored.memory.id
        thread_id = (case.path_parameters or {}).get("thread_id")
        if isinstance(thread_id, str):
            subject_id = (case.query or {}).get("subject_id")
            with contextlib.suppress(DomainError):  # an id the API refuses stays as generated
                thread_messages_add(
                    principal=self.principal,
                    thread_id=thread_id,
                    data={
                        "messages": [{"role": "user", "content": "fuzz target message"}],
                        "subject_id": subject_id if isinstance(subject_id, str) else None,
                    },
                )
        key = (case.headers or {}).get("Idempotency-Key")
        if isinstance(key, str) and IDEMPOTENCY_KEY_RE.fullmatch(key):
            case.headers["Idempotency-Key"] = f"{self.cases}-{key}"[:255]


@pytest.fixture
def fuzzing(tenant):
    """An admin key whose agent already has a few memories (so keys and queries can hit). At the
    end of the run, every operation of MUST_SUCCEED has answered 2xx at least once, so its
    success schema was checked and not only its error envelope."""
    agent = make_agent(tenant, "fuzz-bot")
    principal = Principal(tenant=tenant, agent=agent, scopes=frozenset({"read", "write"}))
    for i, category in enumerate(("core", "daily", "workspace")):
        memory_store(
            principal=principal,
            data={"text": f"seed fact {i}", "key": f"seed-{i}", "category": category},
        )
    _, raw = make_key(agent, scopes=["read", "write", "admin"])
    state = Fuzzing(principal=principal, raw_key=raw)
    yield state
    never = sorted(
        label
        for label in MUST_SUCCEED
        if not any(200 <= status < 300 for status in state.statuses[label])
    )
    answered = {label: dict(counts) for label, counts in sorted(state.statuses.items())}
    assert not never, f"no 2xx during the run for {never}: {answered}"


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@hypothesis_settings(
    max_examples=6,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
@pytest.mark.django_db
def test_api_keeps_to_its_schema(case, fuzzing):
    fuzzing.prepare(case)
    response = case.call(headers={"Authorization": f"Bearer {fuzzing.raw_key}"})
    fuzzing.statuses[f"{case.operation.method.upper()} {case.operation.path}"][
        response.status_code
    ] += 1
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


@pytest.mark.parametrize("tag", ["billing", "Billing Issue", " crm:v2 ", "a/b.c_d-e"])
def test_documented_tag_pattern_admits_what_the_server_normalises(tag):
    import re

    from memories.api.schema import TAG_INPUT_PATTERN

    assert re.match(TAG_INPUT_PATTERN, tag)
    assert validation.normalise_tag(tag)  # the server takes it too


@pytest.mark.parametrize("tag", ["-lead", "", "   ", "x" * 65, "é"])
def test_documented_tag_pattern_refuses_what_the_server_refuses(tag):
    import re

    from memories.api.schema import TAG_INPUT_PATTERN
    from memoryhub.errors import InvalidInput

    assert not re.match(TAG_INPUT_PATTERN, tag)
    with pytest.raises(InvalidInput):
        validation.normalise_tag(tag)

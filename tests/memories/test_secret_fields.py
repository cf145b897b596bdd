"""The secret corpus through every free-text field an agent writes
(docs/api.md#what-the-secret-scan-refuses).

The whole corpus goes through each field at the layer that decides (`parse_store`,
`parse_update`, `clean_reason`, `clean_key`, confirm and thread end); a sample goes through
HTTP, where the refusal must leave no trace: not in the response, the logs (SQL included) or
any table that could hold it (`Memory`, `MemoryRevision`, `IdempotencyRecord`).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from urllib.parse import quote

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Agent
from accounts.principal import Principal
from memories import idempotency, inputs
from memories.formation import thread_actions
from memories.ids import new_memory_id
from memories.models import IdempotencyRecord, Memory, MemoryRevision
from memories.services import changes, lifecycle, store
from memories.services.operator_actions import CORRECTABLE_FIELDS
from memories.services.write_support import clean_reason
from memoryhub.errors import InvalidInput, SecretRejected
from tests.support.secret_corpus import FALSE_POSITIVES, TRUE_POSITIVES

NOW = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
TP_IDS = [f"{rule}-{index}" for index, (rule, _, _) in enumerate(TRUE_POSITIVES)]
FP_IDS = [f"fp-{index}" for index in range(len(FALSE_POSITIVES))]

# Store body field → (the body carrying `value` there, the field path a finding names).
STORE_FIELDS = {
    "text": (lambda v: {"text": v}, "text"),
    "data": (lambda v: {"text": "ok", "data": {"note": v}}, "data.note"),
    "tags": (lambda v: {"text": "ok", "tags": ["ok", v]}, "tags[1]"),
    "key": (lambda v: {"text": "ok", "key": v}, "key"),
    "kind": (lambda v: {"text": "ok", "kind": v}, "kind"),
    "category": (lambda v: {"text": "ok", "category": v}, "category"),
    "mentions": (
        lambda v: {"text": "ok", "mentions": [{"name": v, "type": "person"}]},
        "mentions[0].name",
    ),
    "source_provider": (lambda v: {"text": "ok", "source_provider": v}, "source_provider"),
    "subject_id": (lambda v: {"text": "ok", "subject_id": v}, "subject_id"),
    "thread_id": (lambda v: {"text": "ok", "thread_id": v}, "thread_id"),
    "session_id": (lambda v: {"text": "ok", "session_id": v}, "session_id"),
}
# PATCH body field (agents), plus `key` (operators' corrections) → the same shapes.
UPDATE_FIELDS = ("text", "data", "tags", "kind", "category", "mentions", "key")


def _refused(call, rule: str, field: str) -> None:
    with pytest.raises(SecretRejected) as exc:
        call()
    assert exc.value.details == {"rule": rule, "field": field}


@pytest.fixture
def principal(tenant, agent):
    return Principal(tenant=tenant, agent=agent, scopes=frozenset({"read", "write"}))


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_is_refused_in_every_field(principal, rule, text, secret):
    agent = principal.agent
    for build, path in STORE_FIELDS.values():
        _refused(lambda b=build: inputs.parse_store(b(text), agent=agent, now=NOW), rule, path)
    for name in UPDATE_FIELDS:
        build, path = STORE_FIELDS[name]
        body = {name: build(text)[name]}
        _refused(
            lambda b=body: inputs.parse_update(b, now=NOW, allowed=CORRECTABLE_FIELDS),
            rule,
            path,
        )
    _refused(lambda: clean_reason(text), rule, "reason")
    _refused(lambda: idempotency.clean_key(text), rule, "Idempotency-Key")
    _refused(
        lambda: changes.memory_confirm(
            principal=principal, memory_id=new_memory_id(), subject_id=text
        ),
        rule,
        "subject_id",
    )
    _refused(
        lambda: thread_actions.thread_end(principal=principal, thread_id=text), rule, "thread_id"
    )


def _accepted_or_shape_refused(call) -> bool:
    """True when accepted; False when refused for its shape; never a secret refusal."""
    try:
        call()
    except SecretRejected as exc:
        pytest.fail(f"false positive flagged: {exc.details}")
    except InvalidInput:
        return False
    return True


@pytest.mark.django_db
@pytest.mark.parametrize("text", FALSE_POSITIVES, ids=FP_IDS)
def test_false_positive_is_accepted_in_every_field(principal, text):
    agent = Agent(tenant=principal.tenant, slug="x")
    shaped = {
        name: _accepted_or_shape_refused(
            lambda b=build: inputs.parse_store(b(text), agent=agent, now=NOW)
        )
        for name, (build, _) in STORE_FIELDS.items()
    }
    # Free text with only a length limit is always accepted.
    assert shaped["text"] and shaped["data"]
    assert shaped["mentions"] == (len(text.strip()) <= 200)
    assert shaped["source_provider"] == (len(text) <= 100)
    assert clean_reason(text) == text.strip()
    _accepted_or_shape_refused(lambda: idempotency.clean_key(text))

    # Stored, with the text in every free-text field its shape allows, then forgotten with it
    # as the reason: the whole write path lets it through.
    body = {"text": text, "data": {"note": text}, "dedup_policy": "insert"}
    for name in ("mentions", "source_provider", "key", "subject_id", "thread_id", "kind", "tags"):
        if shaped[name]:
            body.update({k: v for k, v in STORE_FIELDS[name][0](text).items() if k != "text"})
    memory = store.memory_store(principal=principal, data=body, now=NOW).memory
    assert memory.text == text and memory.data == {"note": text}
    if shaped["mentions"]:
        assert memory.mentions == [{"name": text.strip(), "type": "person"}]
    subject = memory.subject_id
    deleted, _ = lifecycle.memory_forget(
        principal=principal, memory_id=memory.pk, subject_id=subject, reason=text, now=NOW
    )
    assert deleted and Memory.objects.get(pk=memory.pk).tombstone_reason == text.strip()


# --- through HTTP: a sample of the corpus per field, refused without a trace -----------------

SAMPLE = TRUE_POSITIVES[::7]
SAMPLE_IDS = TP_IDS[::7]


def _tables() -> str:
    rows = [
        *Memory.objects.values(),
        *MemoryRevision.objects.values(),
        *IdempotencyRecord.objects.values(),
    ]
    return json.dumps(rows, default=str, ensure_ascii=False)


def _without_a_trace(caplog, send, *, rule, field, values) -> None:
    counts = (Memory.objects.count(), MemoryRevision.objects.count())
    tables = _tables()
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    with CaptureQueriesContext(connection) as queries:  # SQL is logged too, at DEBUG
        response = send()
    assert caplog.records  # captured, so the secret's absence from them means something
    assert response.status_code == 422, response.content
    assert response.json()["error"] == {
        "code": "SECRET_REJECTED",
        "message": "A secret-shaped value was found",
        "details": {"rule": rule, "field": field},
    }
    statements = " ".join(query["sql"] for query in queries.captured_queries)
    for value in values:
        assert value not in response.content.decode()
        assert value not in caplog.text
        assert value not in statements
    assert (Memory.objects.count(), MemoryRevision.objects.count()) == counts
    assert _tables() == tables
    assert not IdempotencyRecord.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", sorted(STORE_FIELDS))
def test_store_field_over_http(api_client, caplog, name):
    build, path = STORE_FIELDS[name]
    for rule, text, secret in SAMPLE:
        _without_a_trace(
            caplog,
            lambda t=text: api_client.post(
                "/api/v1/memories", build(t), format="json", HTTP_IDEMPOTENCY_KEY="k1"
            ),
            rule=rule,
            field=path,
            values=(text, secret),
        )


@pytest.fixture
def memory_id(api_client):
    response = api_client.post("/api/v1/memories", {"text": "clean fact"}, format="json")
    assert response.status_code == 201
    return response.json()["memory_id"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", UPDATE_FIELDS[:-1])  # agents cannot re-key
def test_patch_field_over_http(api_client, caplog, memory_id, name):
    build, path = STORE_FIELDS[name]
    for rule, text, secret in SAMPLE:
        _without_a_trace(
            caplog,
            lambda t=text: api_client.patch(
                f"/api/v1/memories/{memory_id}", {name: build(t)[name]}, format="json"
            ),
            rule=rule,
            field=path,
            values=(text, secret),
        )
    assert Memory.objects.get(pk=memory_id).version == 1


@pytest.mark.django_db
def test_forget_reason_confirm_subject_and_idempotency_key_over_http(api_client, caplog, memory_id):
    url = f"/api/v1/memories/{memory_id}"
    for rule, text, secret in SAMPLE:
        trace = {"rule": rule, "values": (text, secret)}
        _without_a_trace(
            caplog,
            lambda t=text: api_client.delete(url, {"reason": t}, format="json"),
            **trace,
            field="reason",
        )
        _without_a_trace(
            caplog,
            lambda t=text: api_client.delete(f"{url}?reason={quote(t)}"),
            **trace,
            field="reason",
        )
        _without_a_trace(
            caplog,
            lambda t=text: api_client.post(f"{url}/confirm?subject_id={quote(t)}"),
            **trace,
            field="subject_id",
        )
        _without_a_trace(
            caplog,
            lambda t=text: api_client.post(
                "/api/v1/memories", {"text": "fine"}, format="json", HTTP_IDEMPOTENCY_KEY=t
            ),
            **trace,
            field="Idempotency-Key",
        )
        _without_a_trace(
            caplog,
            lambda t=text: api_client.post(f"{url}/confirm", HTTP_IDEMPOTENCY_KEY=t),
            **trace,
            field="Idempotency-Key",
        )
    assert Memory.objects.get(pk=memory_id).status == "active"


@pytest.mark.django_db
def test_thread_end_thread_id_over_http(api_client, caplog):
    for rule, text, secret in SAMPLE:
        if "\n" in text:  # not a URL path segment
            continue
        _without_a_trace(
            caplog,
            lambda t=text: api_client.post(
                f"/api/v1/threads/{quote(t, safe='')}/end", HTTP_IDEMPOTENCY_KEY="k2"
            ),
            rule=rule,
            field="thread_id",
            values=(text, secret),
        )


@pytest.mark.django_db
def test_an_unknown_field_named_like_a_secret_is_not_echoed(api_client):
    rule, _, secret = TRUE_POSITIVES[12]  # a GitHub token
    response = api_client.post("/api/v1/memories", {"text": "ok", secret: 1}, format="json")
    assert response.status_code == 422
    assert response.json()["error"]["details"] == {"rule": rule, "field": "body"}
    assert secret not in response.content.decode()


@pytest.mark.django_db
def test_lookups_by_a_secret_shaped_key_store_and_log_nothing(api_client, caplog):
    """Reads store nothing, so they answer as for any unknown key; nothing is logged."""
    _, _, secret = TRUE_POSITIVES[12]
    caplog.set_level(logging.DEBUG)
    recalled = api_client.get(f"/api/v1/memories/by-key/{secret}?subject_id={secret}")
    assert recalled.json() == {"ok": True, "memory": None}
    listed = api_client.get(f"/api/v1/memories?subject_id={secret}&thread_id={secret}")
    assert listed.json()["memories"] == []
    searched = api_client.post("/api/v1/search", {"query": secret}, format="json")
    assert searched.status_code == 200
    gone = api_client.get(f"/api/v1/memories/{secret}")  # a 4xx: Django would log its path
    assert gone.status_code == 404
    assert secret not in caplog.text

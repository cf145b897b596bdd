"""The secret corpus through `POST /api/v1/memories`: every true positive is refused without a
trace (not echoed, not logged, not stored), every false positive and every non-secret of a
programming conversation is stored; through message ingest, non-secrets are kept unredacted."""

from __future__ import annotations

import logging

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.models import Memory, Message
from tests.support.nonsecret_corpus import NON_SECRET_OBJECTS, NON_SECRETS, REPORTED
from tests.support.secret_corpus import (
    FALSE_POSITIVE_OBJECTS,
    FALSE_POSITIVES,
    TRUE_POSITIVES,
    zero_width_split,
)

AWS_KEY = "AKIA" + "IOSFODNN7EXAMPLQ"
SLACK = "xoxb-" + "1234567890-abcdefghijKLMNOP"
TP_IDS = [f"{rule}-{index}" for index, (rule, _, _) in enumerate(TRUE_POSITIVES)]


def _refused_without_a_trace(client, caplog, *, body, rule, field, values):
    caplog.set_level(logging.DEBUG)
    # SQL is logged too (at DEBUG on `django.db.backends`) while queries are captured. (The
    # refusal itself is not: API errors skip Django's request log, which names the path.)
    caplog.set_level(logging.DEBUG, logger="django.db.backends")
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/v1/memories", body, format="json")
    assert response.status_code == 422
    assert response.json() == {
        "ok": False,
        "error": {
            "code": "SECRET_REJECTED",
            "message": "A secret-shaped value was found",
            "details": {"rule": rule, "field": field},
        },
    }
    sent = response.content.decode()
    statements = " ".join(query["sql"] for query in queries.captured_queries)
    assert caplog.records and statements  # both were captured, so their absence means something
    for value in values:
        assert value not in sent
        assert value not in caplog.text
        assert value not in statements
    assert not Memory.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "rule", "field"),
    [
        ({"text": f"my aws key is {AWS_KEY}"}, "aws_access_key_id", "text"),
        ({"text": "ok", "data": {"creds": {"token": SLACK}}}, "slack_token", "data.creds.token"),
        ({"text": "ok", "key": AWS_KEY}, "aws_access_key_id", "key"),
        ({"text": "ok", "tags": ["deploy", AWS_KEY]}, "aws_access_key_id", "tags[1]"),
    ],
)
def test_every_scanned_field_is_named(api_client, caplog, body, rule, field):
    _refused_without_a_trace(
        api_client, caplog, body=body, rule=rule, field=field, values=(AWS_KEY, SLACK)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_is_rejected(api_client, caplog, rule, text, secret):
    _refused_without_a_trace(
        api_client, caplog, body={"text": text}, rule=rule, field="text", values=(text, secret)
    )


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_true_positive_split_by_zero_width_characters_is_rejected(
    api_client, caplog, rule, text, secret
):
    split = zero_width_split(text, secret)
    assert split != text
    _refused_without_a_trace(
        api_client,
        caplog,
        body={"text": "deploy notes", "data": {"credentials": {"token": split}}},
        rule=rule,
        field="data.credentials.token",
        values=(split, zero_width_split(secret, secret), secret),
    )


NEGATIVE_IDS = [f"fp-{i}" for i in range(len(FALSE_POSITIVES))] + [
    f"ns-{i}" for i in range(len(NON_SECRETS))
]
NEGATIVE_OBJECT_IDS = [f"fp-object-{i}" for i in range(len(FALSE_POSITIVE_OBJECTS))] + [
    f"ns-object-{i}" for i in range(len(NON_SECRET_OBJECTS))
]


@pytest.mark.django_db
@pytest.mark.parametrize("text", FALSE_POSITIVES + NON_SECRETS, ids=NEGATIVE_IDS)
def test_false_positive_is_stored(api_client, text):
    response = api_client.post("/api/v1/memories", {"text": text}, format="json")
    assert response.status_code == 201, response.content
    assert Memory.objects.get().text == text


@pytest.mark.django_db
@pytest.mark.parametrize(
    "data", FALSE_POSITIVE_OBJECTS + NON_SECRET_OBJECTS, ids=NEGATIVE_OBJECT_IDS
)
def test_false_positive_object_is_stored(api_client, data):
    response = api_client.post("/api/v1/memories", {"data": data}, format="json")
    assert response.status_code == 201, response.content
    assert Memory.objects.get().data == data


@pytest.mark.django_db
def test_reported_file_names_and_expressions_are_stored_in_data_and_text(api_client):
    data = {"credentials": NON_SECRET_OBJECTS[0]["credentials"], "snippets": REPORTED}
    response = api_client.post(
        "/api/v1/memories", {"text": REPORTED[0], "data": data}, format="json"
    )
    assert response.status_code == 201, response.content
    assert Memory.objects.get().data == data


@pytest.mark.django_db
def test_non_secrets_in_messages_are_stored_unredacted(api_client, settings):
    settings.MEMORYHUB_LLM_URL = ""  # no extraction: the messages alone
    messages = [
        {"role": "user" if index % 2 == 0 else "assistant", "content": text}
        for index, text in enumerate(NON_SECRETS)
    ]
    response = api_client.post(
        "/api/v1/threads/code-chat/messages", {"messages": messages}, format="json"
    )
    assert response.status_code == 202, response.content
    body = response.json()
    assert (body["accepted"], body["redacted"]) == (len(NON_SECRETS), 0)
    stored = list(Message.objects.order_by("seq").values_list("content", "redactions"))
    assert stored == [(text, []) for text in NON_SECRETS]


@pytest.mark.django_db
def test_a_secret_beside_a_credentials_path_is_redacted_and_the_path_kept(api_client, settings):
    settings.MEMORYHUB_LLM_URL = ""
    _, text, secret = next(tp for tp in TRUE_POSITIVES if "creds.json" in tp[1])
    message = f"{REPORTED[0]}\n{text}"
    response = api_client.post(
        "/api/v1/threads/code-chat/messages",
        {"messages": [{"role": "user", "content": message}]},
        format="json",
    )
    assert response.status_code == 202, response.content
    assert response.json()["redacted"] == 1
    stored = Message.objects.get()
    assert stored.content == f"{REPORTED[0]}\nkey_file = 'creds.json'; [redacted:generic_secret]"
    assert secret not in stored.content
    assert stored.redactions == ["generic_secret"]

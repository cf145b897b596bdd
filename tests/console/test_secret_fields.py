"""The secret corpus through what operators write: JSONL import (every field of a line, the
whole corpus), the bulk tag, and a sample through the console's forms (correction, tombstone
reason, bulk tombstone and tag, agent and key names): refused, named, never shown back, never
logged, never stored."""

from __future__ import annotations

import html
import io
import json
import logging

import pytest

from accounts.models import Agent, ApiKey
from memories.console.forms import CorrectionForm
from memories.models import IdempotencyRecord, Memory, MemoryRevision
from memories.services.jsonl_import import ImportLineError, jsonl_import
from memories.services.operator_actions import memory_add_tag
from memoryhub.errors import SecretRejected
from tests.factories import make_operator
from tests.support.secret_corpus import FALSE_POSITIVES, TRUE_POSITIVES

TP_IDS = [f"{rule}-{index}" for index, (rule, _, _) in enumerate(TRUE_POSITIVES)]
IDS = ["mem_01ARZ3NDEKTSV4RRFFQ69G5FA1", "mem_01ARZ3NDEKTSV4RRFFQ69G5FA2"]

# A line's field → (its value carrying `v`, the path a finding names).
IMPORT_FIELDS = {
    "text": (lambda v: v, "text"),
    "data": (lambda v: {"note": v}, "data.note"),
    "tags": (lambda v: ["ok", v], "tags[1]"),
    "key": (lambda v: v, "key"),
    "kind": (lambda v: v, "kind"),
    "category": (lambda v: v, "category"),
    "mentions": (lambda v: [{"name": v, "type": "person"}], "mentions[0].name"),
    "source_provider": (lambda v: v, "source_provider"),
    "subject_id": (lambda v: v, "subject_id"),
    "thread_id": (lambda v: v, "thread_id"),
    "tombstone_reason": (lambda v: v, "tombstone_reason"),
    "tombstoned_by": (lambda v: v, "tombstoned_by"),
    "created_by": (lambda v: v, "created_by"),
    "embedding_model": (lambda v: v, "embedding_model"),
    "agent": (lambda v: v, "agent"),
}


def _line(memory_id: str, **fields) -> str:
    record = {
        "format": "memoryhub.memory/1",
        "id": memory_id,
        "agent": "support-bot",
        "category": "core",
        "text": "Imported fact",
        "status": "active",
        "created_by": "agent:support-bot",
        **fields,
    }
    return json.dumps(record, ensure_ascii=False)


@pytest.mark.django_db
@pytest.mark.parametrize(("rule", "text", "secret"), TRUE_POSITIVES, ids=TP_IDS)
def test_import_and_bulk_tag_refuse_every_true_positive(tenant, agent, rule, text, secret):
    for name, (build, path) in IMPORT_FIELDS.items():
        lines = [_line(IDS[0]), _line(IDS[1], **{name: build(text)})]
        with pytest.raises(ImportLineError) as exc:
            jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
        assert (exc.value.line, exc.value.message) == (
            2,
            f"{path}: a secret-shaped value ({rule}) is never stored",
        )
        assert secret not in str(exc.value)
    with pytest.raises(SecretRejected) as refused:
        memory_add_tag(tenant=tenant, memory_ids=[], tag=text, actor="operator:t")
    assert refused.value.details == {"rule": rule, "field": "tag"}
    assert not Memory.objects.exists() and not MemoryRevision.objects.exists()


@pytest.mark.django_db
def test_import_accepts_every_false_positive(tenant, agent):
    lines = []
    for index, text in enumerate(FALSE_POSITIVES):
        fields = {"text": text, "data": {"note": text}, "tombstone_reason": text}
        if len(text.strip()) <= 200:
            fields["mentions"] = [{"name": text, "type": "person"}]
        if len(text) <= 100:
            fields["source_provider"] = text
        lines.append(_line(f"mem_01ARZ3NDEKTSV4RRFFQ69G{index:04d}", **fields))
    result = jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert result.created == len(FALSE_POSITIVES)
    stored = dict(Memory.objects.values_list("text", "data"))
    assert stored == {text: {"note": text} for text in FALSE_POSITIVES}


# --- through the console's forms: a sample --------------------------------------------------

SAMPLE = TRUE_POSITIVES[::7]


def _tables() -> str:
    rows = [
        *Memory.objects.values(),
        *MemoryRevision.objects.values(),
        *IdempotencyRecord.objects.values(),
        *Agent.objects.values("slug", "name"),
        *ApiKey.objects.values("name", "subject_id"),
    ]
    return json.dumps(rows, default=str, ensure_ascii=False)


def _refused(caplog, send, *, rule, field, values, expect) -> str:
    tables = _tables()
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    page = send().content.decode()
    assert expect.format(rule=rule, field=field) in html.unescape(page), page
    for value in values:
        assert value not in page and html.escape(value) not in page
        assert value not in caplog.text
    assert _tables() == tables
    return page


@pytest.fixture
def admin_client(login, tenant):
    return login(make_operator(tenant, "admin@acme.test", "admin").user)


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["text", "tags", "kind", "category"])
def test_correction_form(admin_client, caplog, agent, store_memory, field):
    memory = store_memory(agent, "The office opens at 9")
    for rule, text, secret in SAMPLE:
        form = {
            **CorrectionForm.display_values(memory),
            field: text,
            "expected_version": 1,
            "base": json.dumps(CorrectionForm.base_of(memory)),
        }
        _refused(
            caplog,
            lambda f=form: admin_client.post(f"/console/memories/{memory.pk}/save/", f),
            rule=rule,
            field=field,
            values=(text, secret),
            expect="A secret-shaped value ({rule}) is never stored",
        )
    assert Memory.objects.get().version == 1


@pytest.mark.django_db
def test_reasons_tags_and_names(admin_client, caplog, agent, store_memory):
    memory = store_memory(agent, "The office opens at 9")
    refusal = "{field}: a secret-shaped value ({rule}) is never stored"
    for rule, text, secret in SAMPLE:
        trace = {"rule": rule, "values": (text, secret)}
        _refused(
            caplog,
            lambda t=text: admin_client.post(
                f"/console/memories/{memory.pk}/tombstone/", {"reason": t}, follow=True
            ),
            field="reason",
            expect=refusal,
            **trace,
        )
        for action, name in (("tombstone", "reason"), ("tag", "tag")):
            _refused(
                caplog,
                lambda t=text, a=action, n=name: admin_client.post(
                    "/console/memories/bulk/", {"action": a, n: t, "ids": [memory.pk]}, follow=True
                ),
                field=name,
                expect=refusal,
                **trace,
            )
        _refused(
            caplog,
            lambda t=text: admin_client.post("/console/agents/", {"slug": "new-bot", "name": t}),
            field="name",
            expect="A secret-shaped value ({rule}) is never stored",
            **trace,
        )
        for name in ("name", "subject_id"):
            _refused(
                caplog,
                lambda t=text, n=name: admin_client.post(
                    f"/console/agents/{agent.slug}/keys/", {"scopes": ["read"], n: t}
                ),
                field=name,
                expect="A secret-shaped value ({rule}) is never stored",
                **trace,
            )
        upload = io.BytesIO(_line(IDS[0], mentions=[{"name": text, "type": "x"}]).encode())
        upload.name = "backup.jsonl"
        _refused(
            caplog,
            lambda u=upload: admin_client.post("/console/export/import/", {"file": u}, follow=True),
            field="mentions[0].name",
            expect="Nothing imported: line 1: " + refusal,
            **trace,
        )
    assert Memory.objects.get().status == "active" and Memory.objects.get().tags == []

"""A key bound to a subject acts for that subject only: every surface that spans the whole
tenant (its webhooks, its kinds) is refused to it, whatever its scopes; its subject's own reads
and erasure stay open to it."""

from __future__ import annotations

import pytest

from memories.models import WebhookEndpoint
from memories.webhooks import delivery, endpoints
from tests.factories import make_agent
from tests.support.webhooks import T0, receiver, store  # noqa: F401 - the fixture

KIND = {"cardinality": "multiple", "memory_type": "semantic", "description": "A pet"}


def _refused(response) -> None:
    assert response.status_code == 403, response.content
    error = response.json()["error"]
    assert error["code"] == "SCOPE_DENIED"
    assert "bound to a subject" in error["message"]
    assert error["details"] == {"scope": "admin", "subject_bound": True}


@pytest.mark.django_db
def test_a_subject_bound_admin_key_cannot_see_other_subjects_through_a_webhook(
    receiver,  # noqa: F811 - the fixture
    tenant,
    agent,
    key_client,
):
    bob = key_client(agent, scopes=["read", "write", "admin"], subject_id="bob")
    _refused(bob.post("/api/v1/webhooks", {"url": receiver.url}, format="json"))
    assert not WebhookEndpoint.objects.exists()
    # Had it been created, this endpoint would have received alice's and other agents' news.
    store(agent, "Alice is allergic to peanuts", scope="user", subject_id="alice")
    store(make_agent(tenant, "billing-bot"), "Invoices go out on the 1st")
    delivery.dispatch_webhooks(now=T0)
    assert receiver.received == []


@pytest.mark.django_db
def test_every_tenant_wide_admin_surface_refuses_a_subject_bound_key(
    receiver,  # noqa: F811 - the fixture
    tenant,
    agent,
    key_client,
):
    hook = endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    admin = key_client(agent, scopes=["read", "write", "admin"])
    assert admin.put("/api/v1/kinds/Pet", KIND, format="json").status_code == 201
    bob = key_client(agent, scopes=["read", "write", "admin"], subject_id="bob")
    _refused(bob.get("/api/v1/webhooks"))
    _refused(bob.delete(f"/api/v1/webhooks/{hook.endpoint.pk}"))
    _refused(bob.put("/api/v1/kinds/Pet", {**KIND, "description": "Bob's"}, format="json"))
    _refused(bob.put("/api/v1/kinds/Toy", KIND, format="json"))
    _refused(bob.delete("/api/v1/kinds/Pet"))
    assert WebhookEndpoint.objects.filter(pk=hook.endpoint.pk).exists()
    pet = admin.get("/api/v1/kinds/Pet").json()["kind"]
    assert pet["description"] == "A pet"
    assert admin.get("/api/v1/kinds/Toy").status_code == 404
    # The same surfaces stay open to the tenant-wide admin key.
    assert len(admin.get("/api/v1/webhooks").json()["webhooks"]) == 1
    assert admin.delete("/api/v1/kinds/Pet").status_code == 200
    assert admin.delete(f"/api/v1/webhooks/{hook.endpoint.pk}").status_code == 200


@pytest.mark.django_db
def test_a_subject_bound_key_keeps_its_subjects_reads_and_erasure(tenant, agent, key_client):
    bob = key_client(agent, scopes=["read", "write", "admin"], subject_id="bob")
    alice = key_client(agent, scopes=["read", "write"], subject_id="alice")
    mine = bob.post("/api/v1/memories", {"text": "Bob likes tea"}, format="json")
    assert mine.status_code == 201
    theirs = alice.post("/api/v1/memories", {"text": "Alice likes jazz"}, format="json")
    assert theirs.status_code == 201
    assert bob.get("/api/v1/kinds").status_code == 200
    assert bob.get("/api/v1/kinds/UserProfile").status_code == 200
    events = bob.get("/api/v1/events").json()["events"]
    assert [e["memory_id"] for e in events] == [mine.json()["memory_id"]]
    assert bob.delete("/api/v1/subjects/alice").status_code == 403
    erased = bob.delete("/api/v1/subjects/bob")
    assert (erased.status_code, erased.json()["memories"]) == (200, 1)


@pytest.mark.parametrize("by", ["id", "key"])
@pytest.mark.django_db
def test_a_subject_bound_key_purges_only_its_subjects_memories(agent, key_client, by):
    admin = key_client(agent, scopes=["read", "write", "admin"])
    bob = key_client(agent, scopes=["read", "write", "admin"], subject_id="bob")
    shared = {
        "workspace": {"text": "The office closes at 6", "category": "workspace", "key": "k1"},
        "subject-less": {"text": "Replies in English", "key": "k2"},
    }
    for body in shared.values():
        memory_id = admin.post("/api/v1/memories", body, format="json").json()["memory_id"]
        target = memory_id if by == "id" else f"by-key/{body['key']}"
        _refused(bob.delete(f"/api/v1/memories/{target}?purge=true"))
        assert admin.get(f"/api/v1/memories/{memory_id}").json()["memory"]["text"] == body["text"]
    mine = bob.post("/api/v1/memories", {"text": "Bob likes tea", "key": "k3"}, format="json")
    target = mine.json()["memory_id"] if by == "id" else "by-key/k3"
    assert bob.delete(f"/api/v1/memories/{target}?purge=true").json()["deleted"] is True

"""`GET /api/v1/events` (docs/operations.md#the-change-feed): visibility, the cursor, retention,
commit order."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from accounts.principal import Principal
from memories.events import feed
from memories.jobs.retention_purge import purge_retention
from memories.models import Event
from memories.services.store import memory_store
from tests.factories import make_agent, make_tenant


def store(agent, text="a fact", **data):
    data.setdefault("dedup_policy", "insert")
    return memory_store(
        principal=Principal(tenant=agent.tenant, agent=agent), data={"text": text, **data}
    ).memory


def page(client, **params):
    response = client.get("/api/v1/events", params)
    assert response.status_code == 200, response.content
    body = response.json()
    return [(e["type"], e["memory_id"]) for e in body["events"]], body["next_cursor"], body


@pytest.mark.django_db
def test_an_agent_sees_its_own_workspace_and_shared_events_of_its_subject_only(
    tenant, agent, key_client
):
    helper = make_agent(tenant, "helper")
    stranger = make_agent(tenant, "stranger")
    agent.reads_from.add(helper)
    other = make_agent(make_tenant("globex"), "support-bot")
    own = store(agent, "own fact")
    mine_s1 = store(agent, "about cust-1", subject_id="cust-1")
    store(agent, "about cust-2", subject_id="cust-2")
    workspace = store(agent, "office hours", category="workspace")
    shared = store(helper, "helper fact")
    store(helper, "helper chat", category="conversation", thread_id="t")
    store(stranger, "not shared with me")
    store(other, "another tenant")

    events, _, body = page(key_client(agent))
    assert events == [
        ("memory.created", own.pk),
        ("memory.created", workspace.pk),
        ("memory.created", shared.pk),
    ]
    first = body["events"][0]
    assert set(first) == {
        "id",
        "type",
        "tenant",
        "agent",
        "subject_id",
        "scope",
        "memory_id",
        "version",
        "occurred_at",
        "data",
    }
    assert (first["tenant"], first["agent"], first["version"]) == ("acme", "support-bot", 1)
    assert first["scope"] == "agent" and first["data"]["scope"] == "agent"
    assert first["data"]["text"] == "own fact" and first["data"]["source"] == "own"
    assert body["events"][2]["data"]["source"] == "shared:helper"
    assert body["events"][1]["data"]["source"] == "workspace"

    # A key bound to cust-1 sees cust-1's and subject-less events, never cust-2's.
    events, _, _ = page(key_client(agent, subject_id="cust-1"))
    assert ("memory.created", mine_s1.pk) in events
    assert all(memory_id != mine_s1.pk or t for t, memory_id in events)
    assert len(events) == 4
    assert page(key_client(agent), subject_id="cust-1")[0] == events
    # A bound key naming another subject is refused, as on every read.
    response = key_client(agent, subject_id="cust-1").get(
        "/api/v1/events", {"subject_id": "cust-2"}
    )
    assert response.status_code == 403
    # Without shared events.
    assert ("memory.created", shared.pk) not in page(key_client(agent), include_shared="false")[0]
    # The other tenant's agent sees its own only.
    assert page(key_client(other))[0] == [
        ("memory.created", Event.objects.get(tenant=other.tenant).memory_id)
    ]


@pytest.mark.django_db
def test_a_user_memorys_events_reach_every_agent_acting_for_its_subject_only(
    tenant, other_tenant, agent, key_client
):
    """A user memory's events are the subject's, across agents, as the memory
    is: created by one agent, changed and forgotten by others acting for the subject."""
    billing = make_agent(tenant, "billing-bot")
    memory = store(agent, "Ann is allergic to peanuts", subject_id="ann", scope="user")
    changed = key_client(billing).patch(
        f"/api/v1/memories/{memory.pk}?subject_id=ann", {"text": "Ann: no nuts"}, format="json"
    )
    assert changed.status_code == 200, changed.content
    pending = store(
        billing, "Ann may be vegan", subject_id="ann", scope="user", capture_mode="inferred"
    )
    forgotten = key_client(make_agent(tenant, "sms-bot"), subject_id="ann").delete(
        f"/api/v1/memories/{memory.pk}"
    )
    assert forgotten.json()["deleted"] is True
    store(agent, "Bob is vegan", subject_id="bob", scope="user")

    expected = [
        ("memory.created", memory.pk),
        ("memory.updated", memory.pk),
        ("memory.created", pending.pk),
        ("review.pending", pending.pk),
        ("memory.forgotten", memory.pk),
    ]
    reader = make_agent(tenant, "read-bot")
    events, _, body = page(key_client(reader), subject_id="ann")
    assert events == expected
    assert page(key_client(reader, subject_id="ann"))[0] == expected
    for event in body["events"]:
        assert (event["scope"], event["agent"], event["subject_id"]) == ("user", None, "ann")
        assert (event["data"]["source"], event["data"]["scope"]) == ("user", "user")
    assert [e["version"] for e in body["events"]] == [1, 2, 1, 1, 3]
    # The writer itself sees them only when it acts for Ann, like the memory.
    assert page(key_client(agent), subject_id="ann")[0] == expected
    # Nobody acting for another subject or for none, and no other tenant (the same subject id
    # there included), sees any of them.
    for client, params in (
        (key_client(agent), {}),
        (key_client(reader), {}),
        (key_client(reader), {"subject_id": "bob"}),
        (key_client(reader, subject_id="bob"), {}),
        (key_client(make_agent(other_tenant, "support-bot")), {"subject_id": "ann"}),
    ):
        seen = {memory_id for _, memory_id in page(client, **params)[0]}
        assert not seen & {memory.pk, pending.pk}, params

    # Erasing Ann: her user memories' purges and the erasure reach whoever acts for her only.
    _, cursor, _ = page(key_client(reader), subject_id="ann")
    admin = key_client(agent, scopes=["read", "write", "admin"])
    assert admin.delete("/api/v1/subjects/ann?purge=true").json()["memories"] == 2
    events, _, body = page(key_client(reader), subject_id="ann", after=cursor)
    assert sorted(events, key=str) == sorted(
        [
            ("memory.purged", memory.pk),
            ("memory.purged", pending.pk),
            ("review.resolved", pending.pk),
            ("subject.erased", None),
        ],
        key=str,
    )
    assert {e["scope"] for e in body["events"] if e["memory_id"]} == {"user"}
    assert "peanuts" not in str(body) and "nuts" not in str(body)
    assert page(key_client(reader), after=cursor)[0] == []
    assert page(key_client(reader), subject_id="bob", after=cursor)[0] == []


@pytest.mark.django_db
def test_the_cursor_walks_every_event_once_and_an_empty_page_has_one(agent, key_client):
    client = key_client(agent)
    _, start, body = page(client)
    assert body["events"] == [] and start == "0"
    made = [store(agent, f"fact {i}").pk for i in range(5)]

    seen, cursor = [], start
    for _ in range(4):
        events, cursor, _ = page(client, after=cursor, limit=2)
        seen += [memory_id for _, memory_id in events]
    assert seen == made
    events, again, _ = page(client, after=cursor)
    assert events == [] and again == cursor  # poll from here
    later = store(agent, "later").pk
    assert page(client, after=cursor)[0] == [("memory.created", later)]
    # types filters; an unknown type or cursor is INVALID_INPUT.
    assert page(client, types="memory.forgotten")[0] == []
    bad = client.get("/api/v1/events", {"types": "memory.nope"})
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (400, "types")
    assert client.get("/api/v1/events", {"after": "abc"}).status_code == 400


@pytest.mark.django_db
def test_paging_goes_on_across_retention(agent, key_client, settings):
    client = key_client(agent)
    old = [store(agent, f"old {i}").pk for i in range(3)]
    Event.objects.update(occurred_at=timezone.now() - timedelta(days=10))
    new = [store(agent, f"new {i}").pk for i in range(2)]
    first, cursor, _ = page(client, limit=2)
    assert [m for _, m in first] == old[:2]

    counts = purge_retention(now=timezone.now())
    assert counts["events_deleted"] == 3
    rest, cursor, _ = page(client, after=cursor)
    assert [m for _, m in rest] == new  # the purged third is gone, nothing new is skipped
    assert page(client, after=cursor)[0] == []


@pytest.mark.django_db
def test_the_feed_needs_a_key_with_read(agent, key_client):
    assert key_client(agent, scopes=["write"]).get("/api/v1/events").status_code == 403
    from rest_framework.test import APIClient

    assert APIClient().get("/api/v1/events").status_code == 401


@pytest.mark.django_db(transaction=True)
def test_an_event_committed_late_is_not_skipped_by_a_cursor(agent):
    """The slow transaction inserts its event first (the lower id) and commits last: a reader
    that moved past the fast one still gets it, after it, in position order."""
    principal = Principal(tenant=agent.tenant, agent=agent)
    inserted, release, done = threading.Event(), threading.Event(), threading.Event()
    slow = {}

    def slow_writer():
        try:
            with transaction.atomic():
                # A workspace memory: another owner, so no cap lock is shared with the fast one.
                slow["memory"] = store(agent, "slow", category="workspace")
                inserted.set()
                release.wait(10)
        finally:
            connections.close_all()
            done.set()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert inserted.wait(10)
    fast = store(agent, "fast")
    events, cursor = feed.events_page(principal=principal)
    assert [e["memory_id"] for e in events] == [fast.pk]

    release.set()
    assert done.wait(10)
    thread.join()
    events, _ = feed.events_page(principal=principal, after=cursor)
    assert [e["memory_id"] for e in events] == [slow["memory"].pk]
    slow_event, fast_event = (
        Event.objects.get(memory_id=slow["memory"].pk),
        Event.objects.get(memory_id=fast.pk),
    )
    assert slow_event.id < fast_event.id and slow_event.position > fast_event.position

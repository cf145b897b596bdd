"""A subject's page ("everything about alice"), the subject column, and erasure from the console
through the service `DELETE /api/v1/subjects/{id}` uses."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories.models import Memory, MemoryRevision, Message, Status, Thread
from tests.factories import make_agent, make_key, make_tenant

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(agent, store_memory, make_thread):
    """alice's memories with two agents, a thread and a bound key; bob's and another tenant's
    alice, which her page never shows."""
    sales = make_agent(agent.tenant, "sales-bot")
    rows = {
        "pref": store_memory(agent, "Alice prefers French", subject_id="alice", key="pref.lang"),
        "sales": store_memory(sales, "Alice asked for a discount", subject_id="alice"),
        "inferred": store_memory(
            agent, "Alice might move", subject_id="alice", capture_mode="inferred"
        ),
        "bob": store_memory(agent, "Bob prefers English", subject_id="bob"),
        "policy": store_memory(agent, "Escalate disputes to a human"),
    }
    make_thread(agent, "Bonjour", "Hello Alice", thread_id="chat-1", subject_id="alice")
    make_key(agent, subject_id="alice")
    other = make_agent(make_tenant("globex"), "globex-bot")
    rows["globex"] = store_memory(other, "Globex's Alice likes golf", subject_id="alice")
    return rows


def test_the_page_shows_everything_about_the_subject_and_nothing_else(owner_client, alice):
    body = owner_client.get("/console/subjects/alice/").content.decode()
    assert "Everything about" in body and ">alice</span>" in body
    for text in ("Alice prefers French", "Alice asked for a discount", "Alice might move"):
        assert text in body
    for text in ("Bob prefers English", "Escalate disputes", "golf"):
        assert text not in body
    assert "sales-bot" in body and "chat-1" in body
    assert body.count('class="mono">mh_') == 1  # the key bound to alice, by its prefix only
    assert '<span class="stat-value">3</span><span class="stat-label">Live memories' in body
    assert '<span class="stat-value">1</span><span class="stat-label">Pending review' in body
    assert "/console/export/markdown/?subject=alice&amp;status=live" in body


def test_a_subject_nothing_is_known_about_is_a_404_like_another_tenants(owner_client, alice):
    assert owner_client.get("/console/subjects/carol/").status_code == 404
    Memory.objects.filter(pk=alice["globex"].pk).update(subject_id="globex-only")
    assert owner_client.get("/console/subjects/globex-only/").status_code == 404


def test_the_page_runs_a_fixed_number_of_queries(owner_client, agent, alice, store_memory):
    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert owner_client.get("/console/subjects/alice/").status_code == 200
        return len(ctx.captured_queries)

    few = queries()
    for i in range(12):
        store_memory(make_agent(agent.tenant, f"bot-{i}"), f"Alice fact {i}", subject_id="alice")
    assert queries() == few


def test_the_memories_list_names_and_links_each_memorys_subject(owner_client, alice):
    body = owner_client.get("/console/memories/").content.decode()
    assert 'href="/console/subjects/alice/" title="Everything about alice">alice</a>' in body
    assert 'href="/console/subjects/bob/"' in body
    # A subject id with a slash is a path of its own, not a route.
    memory = alice["pref"]
    Memory.objects.filter(pk=memory.pk).update(subject_id="org/alice")
    assert (
        "Alice prefers French" in owner_client.get("/console/subjects/org/alice/").content.decode()
    )


def test_export_from_the_page_holds_only_the_subject(owner_client, alice):
    response = owner_client.get("/console/export/markdown/?subject=alice&status=live")
    text = b"".join(response.streaming_content).decode()
    assert "Alice prefers French" in text and "Alice asked for a discount" in text
    assert "Bob" not in text and "golf" not in text


def test_only_admins_erase_and_only_with_the_subject_typed_again(login, viewer, reviewer, alice):
    form = {"subject_id": "alice", "confirm": "alice", "mode": "tombstone"}
    for user in (viewer, reviewer):
        assert login(user).post("/console/subject-erasure/", form).status_code == 403
    assert "Erase subject" not in login(reviewer).get("/console/subjects/alice/").content.decode()
    assert Memory.objects.filter(subject_id="alice", status=Status.ACTIVE).count() == 4


def test_erasure_tombstones_the_subjects_memories_and_deletes_its_messages(
    login, admin_user, alice
):
    client = login(admin_user)
    page = client.post(
        "/console/subject-erasure/", {"subject_id": "alice", "confirm": "alic", "mode": "purge"}
    )
    assert page.status_code == 302
    assert Memory.objects.filter(subject_id="alice", status=Status.ACTIVE).count() == 4

    response = client.post(
        "/console/subject-erasure/",
        {"subject_id": "alice", "confirm": "alice", "mode": "tombstone"},
        follow=True,
    )
    assert "Erased alice: 3 memories tombstoned, 1 thread emptied, 2 messages deleted." in (
        response.content.decode()
    )
    mine = Memory.objects.filter(tenant=alice["pref"].tenant, subject_id="alice")
    assert set(mine.values_list("status", flat=True)) == {Status.TOMBSTONED}
    assert MemoryRevision.objects.filter(
        memory_id=alice["pref"].pk, change_type="tombstone", actor="operator:admin@acme.test"
    ).exists()
    assert not Message.objects.filter(thread__subject_id="alice", tenant=alice["pref"].tenant)
    assert Memory.objects.get(pk=alice["bob"].pk).status == Status.ACTIVE
    assert Memory.objects.get(pk=alice["globex"].pk).status == Status.ACTIVE  # another tenant


def test_purge_erases_the_text_for_good(login, admin_user, alice):
    login(admin_user).post(
        "/console/subject-erasure/", {"subject_id": "alice", "confirm": "alice", "mode": "purge"}
    )
    purged = Memory.objects.get(pk=alice["pref"].pk)
    assert purged.text == "" and purged.purged_at is not None
    assert not Thread.objects.filter(tenant=purged.tenant, subject_id="alice").exists()
    assert Memory.objects.get(pk=alice["globex"].pk).text == "Globex's Alice likes golf"

"""The Python clients (sync and async, one test body) on the change feed, webhooks, the API
index and `get_kind`, against a live server (docs/integrations.md)."""

from __future__ import annotations

import httpx
import pytest
from memoryhub_client import (
    ApiIndex,
    Event,
    FeedPage,
    InvalidInputError,
    NotFoundError,
    ScopeDeniedError,
    Webhook,
    WebhookCreated,
)

from tests.factories import make_agent, make_key, make_tenant


def summary(events):
    return [(event.type, event.memory_id, event.version) for event in events]


def test_api_index_lists_every_operation_without_a_key(make_hub, live):
    index = make_hub(key="mh_not_a_key").api_index()
    assert isinstance(index, ApiIndex)
    assert (index.name, index.version) == ("MemoryHub agent API", "v1")
    assert (index.docs, index.schema, index.mcp) == (
        f"{live.url}/api/docs/",
        f"{live.url}/api/schema/",
        f"{live.url}/mcp",
    )
    schema = httpx.get(f"{live.url}/api/schema/", params={"format": "json"}).json()
    operations = sorted(
        f"{method.upper()} {path}"
        for path, item in schema["paths"].items()
        if path.startswith("/api/v1/") and path != "/api/v1/"
        for method in item
        if method in ("get", "post", "put", "patch", "delete")
    )
    assert sorted(f"{e['method']} {e['path']}" for e in index.endpoints) == operations
    assert {"method": "GET", "path": "/api/v1/events", "summary": "Events (a change feed)"} in (
        index.endpoints
    )


def test_events_follow_the_cursor_to_the_present(hub, live):
    stored = [hub.store(f"event fact {i}", dedup_policy="insert") for i in range(5)]
    feed = hub.events(limit=2)
    assert feed.cursor is None  # nothing fetched before iterating
    pages = list(feed.pages())
    assert [len(page.items) for page in pages] == [2, 2, 1]
    events = [event for page in pages for event in page.items]
    assert all(isinstance(event, Event) for event in events)
    assert summary(events) == [("memory.created", s.memory_id, 1) for s in stored]
    first = events[0]
    assert (first.tenant, first.agent, first.subject_id) == ("acme", "support-bot", None)
    assert first.data["text"] == "event fact 0" and first.occurred_at.tzinfo is not None
    assert [e.id for e in events] == sorted(e.id for e in events)
    assert feed.cursor == pages[-1].next_cursor
    assert summary(hub.events()) == summary(events)  # each walk starts over

    # Caught up: an empty page, with a cursor to poll again from.
    empty = hub.events_page(after=feed.cursor)
    assert empty == FeedPage(items=[], next_cursor=feed.cursor)

    later = hub.store("a later fact")
    hub.update(later.memory_id, importance=0.9)
    resumed = hub.events(after=feed.cursor)
    assert summary(resumed) == [
        ("memory.created", later.memory_id, 1),
        ("memory.updated", later.memory_id, 2),
    ]
    assert resumed.cursor != feed.cursor
    assert hub.events_page(after=resumed.cursor).items == []

    updated = list(hub.events(types=["memory.updated"]))
    assert summary(updated) == [("memory.updated", later.memory_id, 2)]
    assert summary(hub.events(types="memory.updated")) == summary(updated)
    assert len(list(hub.events(types=["memory.updated", "memory.created"]))) == 7
    assert list(hub.events(types=["memory.forgotten"])) == []


def test_a_walk_stopped_inside_a_page_resumes_at_that_page(hub):
    stored = [hub.store(f"resume fact {i}", dedup_policy="insert") for i in range(4)]
    first_page = hub.events_page(limit=2)
    partial = hub.events(limit=2)
    for event in partial:
        if event.memory_id == stored[2].memory_id:  # the first item of the second page
            break
    assert partial.cursor == first_page.next_cursor
    rest = hub.events(after=partial.cursor)
    assert [e.memory_id for e in rest] == [stored[2].memory_id, stored[3].memory_id]


def test_events_for_a_subject(hub):
    plain = hub.store("no subject")
    mine = hub.store("about u-1", subject_id="u-1")
    hub.update(mine.memory_id, subject_id="u-1", importance=0.9)
    hub.store("about u-2", subject_id="u-2")
    profile = hub.store("u-1 everywhere", subject_id="u-1", scope="user")
    assert summary(hub.events(subject_id="u-1")) == [
        ("memory.created", plain.memory_id, 1),
        ("memory.created", mine.memory_id, 1),
        ("memory.updated", mine.memory_id, 2),
        ("memory.created", profile.memory_id, 1),
    ]
    assert summary(hub.events()) == [("memory.created", plain.memory_id, 1)]


def test_events_visibility_scope_and_refused_input(make_hub, live):
    hub = make_hub()
    own = hub.store("only mine")
    shared = hub.store("for every agent", category="workspace")
    assert [e.memory_id for e in hub.events()] == [own.memory_id, shared.memory_id]
    _, colleague_key = make_key(make_agent(live.agent.tenant, "colleague"))
    assert [e.memory_id for e in make_hub(key=colleague_key).events()] == [shared.memory_id]
    _, stranger_key = make_key(make_agent(make_tenant("globex"), "bot"))
    assert list(make_hub(key=stranger_key).events()) == []

    _, writer_key = make_key(live.agent, scopes=["write"])
    with pytest.raises(ScopeDeniedError):
        list(make_hub(key=writer_key).events())
    with pytest.raises(InvalidInputError) as refused:
        list(hub.events(types=["memory.exploded"]))
    assert refused.value.field == "types"
    with pytest.raises(InvalidInputError) as bad_cursor:
        hub.events_page(after="not-a-cursor")
    assert bad_cursor.value.field == "after"


def test_webhooks_create_list_delete_with_the_admin_scope(make_hub, live, settings):
    hub = make_hub()
    _, member_key = make_key(live.agent, scopes=["read", "write"])
    member = make_hub(key=member_key)
    with pytest.raises(ScopeDeniedError):
        member.webhooks()
    with pytest.raises(ScopeDeniedError):
        member.create_webhook("https://hooks.example.com/memoryhub")
    with pytest.raises(ScopeDeniedError):
        member.delete_webhook("whk_anything")

    # The SSRF guard: https only, and never a loopback, private or link-local address.
    for url in ("http://hooks.example.com/memoryhub", "https://127.0.0.1/memoryhub"):
        with pytest.raises(InvalidInputError) as refused:
            hub.create_webhook(url)
        assert refused.value.field == "url"
    assert hub.webhooks() == []

    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    created = hub.create_webhook(
        "http://127.0.0.1:9/hook",
        events=["memory.created", "memory.forgotten"],
        description="cache invalidation",
    )
    assert isinstance(created, WebhookCreated) and len(created.secret) >= 32
    webhook = created.webhook
    assert isinstance(webhook, Webhook)
    assert (webhook.url, webhook.events, webhook.description, webhook.enabled) == (
        "http://127.0.0.1:9/hook",
        ["memory.created", "memory.forgotten"],
        "cache invalidation",
        True,
    )
    assert webhook.created_at.tzinfo is not None and webhook.failing_since is None
    everything = hub.create_webhook("http://127.0.0.1:9/all")
    assert everything.webhook.events == [] and everything.secret != created.secret

    listed = hub.webhooks()
    assert sorted(h.id for h in listed) == sorted([webhook.id, everything.webhook.id])
    assert all("secret" not in h.raw for h in listed)

    admin = ("read", "write", "admin")
    _, stranger_key = make_key(make_agent(make_tenant("globex"), "bot"), scopes=admin)
    stranger = make_hub(key=stranger_key)
    with pytest.raises(NotFoundError):
        stranger.delete_webhook(webhook.id)
    assert stranger.webhooks() == []

    assert hub.delete_webhook(webhook.id) is True
    with pytest.raises(NotFoundError):
        hub.delete_webhook(webhook.id)
    assert [h.id for h in hub.webhooks()] == [everything.webhook.id]


def test_get_kind(hub):
    profile = hub.get_kind("UserProfile")
    assert (profile.name, profile.cardinality, profile.tool) == (
        "UserProfile",
        "single",
        "create_user_profile",
    )
    with pytest.raises(NotFoundError):
        hub.get_kind("NoSuchKind")

"""Who may do what in the console: login, roles on every action, tenant isolation."""

from __future__ import annotations

import pytest
from django.urls import URLPattern, reverse

from accounts.console import SESSION_TENANT_KEY
from accounts.models import Agent, ApiKey, Membership
from memories.console import urls as console_urls
from memories.models import (
    Event,
    ExtractionRun,
    Kind,
    Memory,
    Status,
    WebhookDelivery,
    WebhookEndpoint,
)
from memories.services.kind_changes import kind_save
from tests.factories import make_agent, make_key, make_operator

pytestmark = pytest.mark.django_db


# One payload for every action: were a role check missing, each action would have enough to
# change something (and the test checks that nothing changed).
PAYLOAD = {
    "text": "changed by a viewer",
    "expected_version": 1,
    "reason": "r",
    "action": "tombstone",
    "tag": "x",
    "slug": "new-agent",
    "entry_cap": 5,
    "scopes": ["read"],
    "job": "prune_memories",
    "email": "x@acme.test",
    "role": "viewer",
    "password": "a-long-password",
    "name": "Hacked",
    "cardinality": "multiple",
    "memory_type": "episodic",
    "schema": "",
    "user_cap": 5,
    "max_retention": "core=1h",
}


def _console_routes() -> list[URLPattern]:
    return [p for p in console_urls.urlpatterns if isinstance(p, URLPattern)]


def _url(pattern: URLPattern, ids: dict[str, object]) -> str:
    params = list(pattern.pattern.converters)
    unknown = set(params) - set(ids)
    # A new kind of path parameter needs an object here, so the route cannot go untested.
    assert not unknown, f"{pattern.name}: no test object for {unknown}"
    return reverse(f"console:{pattern.name}", kwargs={p: ids[p] for p in params})


def _webhook(tenant) -> tuple[WebhookEndpoint, WebhookDelivery]:
    """A disabled endpoint with one delivery: enough for every webhook action to change."""
    hook = WebhookEndpoint.objects.create(
        tenant=tenant,
        url="https://hooks.example.com/",
        secret_encrypted="v1:",
        created_by="x",
        disabled_at="2026-01-01T00:00:00Z",
    )
    event = Event.objects.create(tenant=tenant, type="subject.erased", position=1, data={})
    delivery = WebhookDelivery.objects.create(
        tenant=tenant, endpoint=hook, event=event, position=1, event_type=event.type
    )
    return hook, delivery


def _webhook_unchanged(hook: WebhookEndpoint) -> None:
    hook.refresh_from_db()  # not deleted, still disabled, nothing resent
    assert hook.disabled_at is not None
    assert WebhookDelivery.objects.filter(endpoint=hook).count() == 1


ROUTES = [pytest.param(p, id=p.name) for p in _console_routes()]
ADDRESSED = [pytest.param(p, id=p.name) for p in _console_routes() if p.pattern.converters]


def test_every_console_view_is_role_checked():
    for pattern in _console_routes():
        assert hasattr(pattern.callback, "console_role"), pattern.name


def test_console_requires_login(client):
    response = client.get("/console/memories/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/console/memories/")


def test_login_page_signs_an_operator_in(client, owner):
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b'name="password"' in page.content
    response = client.post(
        "/accounts/login/",
        {"username": "owner@acme.test", "password": "correct-horse-battery-staple"},
    )
    assert response.status_code == 302 and response["Location"] == "/console/"
    assert client.get("/console/").status_code == 200


@pytest.mark.parametrize("pattern", ROUTES)
def test_viewer_post_to_every_console_route_is_403_and_changes_nothing(
    viewer_client, agent, store_memory, make_thread, pattern
):
    memory = store_memory(agent, "A fact a viewer must not change")
    other = store_memory(agent, "A near-duplicate a viewer must not merge")
    key, _ = make_key(agent)
    thread = make_thread(agent, "A conversation a viewer must not extract")
    hook, delivery = _webhook(agent.tenant)
    url = _url(
        pattern,
        {
            "memory_id": memory.pk,
            "slug": agent.slug,
            "key_id": key.pk,
            "thread_pk": thread.pk,
            "subject_id": "alice",
            "webhook_id": hook.pk,
            "delivery_id": delivery.pk,
            "name": "UserProfile",
        },
    )
    data = {**PAYLOAD, "ids": [memory.pk], "merge": [other.pk]}
    response = viewer_client.post(url, data)
    assert response.status_code == 403, url
    memory.refresh_from_db()
    assert (memory.status, memory.version, memory.text) == (
        Status.ACTIVE,
        1,
        "A fact a viewer must not change",
    )
    assert Memory.objects.get(pk=other.pk).status == Status.ACTIVE
    assert ApiKey.objects.get(pk=key.pk).revoked_at is None
    assert not Agent.objects.filter(slug="new-agent").exists()
    assert not Membership.objects.filter(user__username="x@acme.test").exists()
    assert not ExtractionRun.objects.exists()
    agent.tenant.refresh_from_db()
    assert agent.tenant.extraction_daily_token_budget == 0
    _webhook_unchanged(hook)
    assert WebhookEndpoint.objects.count() == 1  # `Add webhook` added none
    assert (agent.tenant.user_cap, agent.tenant.max_retention) == (1000, {})
    profile = Kind.objects.for_tenant(agent.tenant).get(name="UserProfile")
    assert (profile.cardinality, profile.memory_type) == ("single", "semantic")
    assert not Kind.objects.filter(name="Hacked").exists()


def test_reviewer_may_correct_but_not_purge_or_manage(reviewer_client, agent, store_memory):
    memory = store_memory(agent, "Reviewer fact")
    key, _ = make_key(agent)
    response = reviewer_client.post(
        reverse("console:memory-tombstone", args=[memory.pk]), {"reason": "wrong"}
    )
    assert response.status_code == 302
    for url, data in [
        (reverse("console:memory-purge", args=[memory.pk]), {}),
        (reverse("console:import"), {}),
        (reverse("console:agents"), {"slug": "new-agent"}),
        (reverse("console:key-create", args=[agent.slug]), {"scopes": ["read"]}),
        (reverse("console:key-revoke", args=[key.pk]), {}),
        (reverse("console:job-run"), {"job": "prune_memories"}),
        (reverse("console:members"), {"email": "x@acme.test", "role": "viewer"}),
        (reverse("console:kinds"), {"name": "Invoice", "cardinality": "multiple"}),
        (reverse("console:kind-delete", args=["fact"]), {}),
        (reverse("console:tenant"), {"user_cap": 5}),
    ]:
        assert reviewer_client.post(url, data).status_code == 403, url
    assert reviewer_client.get(reverse("console:members")).status_code == 403


def test_viewer_reads_every_page(viewer_client, agent, store_memory, make_thread):
    memory = store_memory(agent, "Readable")
    thread = make_thread(agent, "A readable conversation")
    for url in [
        "/console/",
        "/console/memories/",
        f"/console/memories/{memory.pk}/",
        "/console/review/",
        "/console/tombstones/",
        "/console/activity/",
        "/console/export/",
        "/console/agents/",
        f"/console/agents/{agent.slug}/",
        "/console/jobs/",
        "/console/threads/",
        f"/console/threads/{thread.pk}/",
        f"/console/subjects/{store_memory(agent, 'About alice', subject_id='alice').subject_id}/",
        "/console/kinds/",
        "/console/kinds/UserProfile/",
        "/console/tenant/",
    ]:
        response = viewer_client.get(url)
        assert response.status_code == 200, url
        # A viewer sees no write controls.
        assert b">Tombstone</button>" not in response.content, url
        assert b">Create key</button>" not in response.content, url
        assert b">Run extraction</button>" not in response.content, url
        assert b">Save budget</button>" not in response.content, url
        assert b">Save kind</button>" not in response.content, url
        assert b">Save policy</button>" not in response.content, url


@pytest.mark.parametrize("pattern", ADDRESSED)
def test_another_tenants_objects_are_404_on_every_addressed_route(
    owner_client, agent, other_tenant, store_memory, make_thread, pattern
):
    foreign_agent = make_agent(other_tenant, "spy-bot")
    foreign = store_memory(foreign_agent, "Globex secret plan", subject_id="globex-user")
    near = store_memory(foreign_agent, "Globex secret plan, again")
    foreign_key, _ = make_key(foreign_agent)
    foreign_thread = make_thread(foreign_agent, "Globex secret conversation")
    foreign_hook, foreign_delivery = _webhook(other_tenant)
    kind_save(tenant=other_tenant, name="GlobexSecret", data={"description": "Globex"})
    url = _url(
        pattern,
        {
            "memory_id": foreign.pk,
            "slug": foreign_agent.slug,
            "key_id": foreign_key.pk,
            "thread_pk": foreign_thread.pk,
            "subject_id": "globex-user",
            "webhook_id": foreign_hook.pk,
            "delivery_id": foreign_delivery.pk,
            "name": "GlobexSecret",
        },
    )
    get = owner_client.get(url)
    assert get.status_code in (404, 405), url  # 405: a POST-only action, whatever the id
    assert b"Globex" not in get.content
    data = {**PAYLOAD, "ids": [foreign.pk], "merge": [near.pk], "expected_version": 1}
    assert owner_client.post(url, data).status_code == 404, url
    foreign.refresh_from_db()
    assert (foreign.status, foreign.version) == (Status.ACTIVE, 1)
    assert Memory.objects.get(pk=near.pk).status == Status.ACTIVE
    assert ApiKey.objects.get(pk=foreign_key.pk).revoked_at is None
    foreign_agent.refresh_from_db()
    assert foreign_agent.entry_cap != 5
    assert not ExtractionRun.objects.filter(thread=foreign_thread).exists()
    _webhook_unchanged(foreign_hook)
    assert Kind.objects.for_tenant(other_tenant).get(name="GlobexSecret").description == "Globex"
    assert not Kind.objects.for_tenant(agent.tenant).filter(name="GlobexSecret").exists()


def test_another_tenants_memories_are_invisible_to_lists_and_bulk(
    owner_client, other_tenant, store_memory
):
    foreign = store_memory(make_agent(other_tenant, "spy-bot"), "Globex secret plan")
    assert owner_client.get("/console/memories/mem_01ARZ3NDEKTSV4RRFFQ69G5FAV/").status_code == 404
    bulk = owner_client.post(
        reverse("console:memory-bulk"), {"action": "tombstone", "ids": [foreign.pk]}
    )
    assert bulk.status_code == 404
    foreign.refresh_from_db()
    assert foreign.status == Status.ACTIVE
    listing = owner_client.get("/console/memories/?status=any")
    assert b"Globex secret plan" not in listing.content


def test_tenant_switcher_changes_scope(login, tenant, other_tenant, store_memory, agent):
    membership = make_operator(tenant, "multi@acme.test", "owner")
    make_operator(other_tenant, "multi@acme.test", "viewer")
    membership.user.refresh_from_db()  # the second call re-set the password
    client = login(membership.user)
    store_memory(agent, "Acme memory")
    store_memory(make_agent(other_tenant, "g-bot"), "Globex memory")
    page = client.get("/console/memories/")
    assert b"Acme memory" in page.content and b"Globex memory" not in page.content
    assert b'id="tenant-select"' in page.content
    response = client.post(
        "/accounts/switch-tenant/", {"tenant": "globex", "next": "/console/memories/"}
    )
    assert response.status_code == 302 and response["Location"] == "/console/memories/"
    assert client.session[SESSION_TENANT_KEY] == other_tenant.pk
    page = client.get("/console/memories/")
    assert b"Globex memory" in page.content and b"Acme memory" not in page.content
    # In globex this operator is only a viewer.
    memory = Memory.objects.get(text="Globex memory")
    assert client.post(f"/console/memories/{memory.pk}/tombstone/").status_code == 403
    # A tenant without membership cannot be switched to.
    assert client.post("/accounts/switch-tenant/", {"tenant": "nope"}).status_code == 404


def test_operator_without_membership_is_refused(login, django_user_model):
    user = django_user_model.objects.create_user(username="nobody", password="x" * 12)
    assert login(user).get("/console/").status_code == 403


def test_csrf_is_enforced_and_sent_by_htmx(owner, agent, store_memory):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    memory = store_memory(agent, "CSRF-protected")
    page = client.get(f"/console/memories/{memory.pk}/")
    assert (
        b"hx-headers='{&quot;X-CSRFToken&quot;" in page.content
        or b'hx-headers=\'{"X-CSRFToken"' in page.content
    )
    url = f"/console/memories/{memory.pk}/tombstone/"
    assert client.post(url, {"reason": "x"}).status_code == 403
    token = client.cookies["csrftoken"].value
    response = client.post(url, {"reason": "x"}, HTTP_X_CSRFTOKEN=token, HTTP_HX_REQUEST="true")
    assert response.status_code == 200

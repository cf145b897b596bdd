"""Webhooks (docs/operations.md#webhooks): signed deliveries, at least once, in order per memory,
with backoff, a delivery log, auto-disable; the SSRF guard. Receivers are real HTTP servers on
127.0.0.1; every other address comes from a stubbed resolver and is never connected to."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest

from accounts.principal import Principal
from memories.models import DeliveryState, IdempotencyRecord, WebhookDelivery, WebhookEndpoint
from memories.services.changes import memory_update
from memories.webhooks import addresses, delivery, endpoints, signing
from memoryhub.errors import InvalidInput
from tests.factories import make_agent, make_tenant
from tests.support.webhooks import T0, store


@pytest.mark.django_db
def test_a_failing_then_hanging_receiver_gets_every_event_signed_and_in_order(
    receiver, tenant, agent
):
    created = endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    receiver.script = [500, "hang"]
    first = store(agent, "Prefers email")
    memory_update(
        principal=Principal(tenant=tenant, agent=agent),
        memory_id=first.pk,
        data={"text": "Prefers phone"},
    )
    memory_update(
        principal=Principal(tenant=tenant, agent=agent),
        memory_id=first.pk,
        data={"text": "Prefers post"},
    )
    second = store(agent, "Lives in Lyon")

    counts = delivery.dispatch_webhooks(now=T0)
    assert counts["created"] == 4
    assert counts["retry"] == 2  # the 500 and the time-out: both memories' first events
    for hours in (1, 2):  # later runs, past the backoff
        delivery.dispatch_webhooks(now=T0 + timedelta(hours=hours))

    secret = created.secret
    got = []
    for record in receiver.received:
        body = json.loads(record.body)
        assert signing.verify(
            secret,
            record.body,
            record.headers["MemoryHub-Signature"],
            now=T0.timestamp(),
            tolerance=3 * 3600,
        )
        assert record.headers["MemoryHub-Event"] == body["type"]
        assert record.headers["Host"] == receiver.url.split("/")[2]
        got.append((body["memory_id"], body["version"], record.answered))
    acknowledged = [(m, v) for m, v, status in got if status == 200]
    assert sorted(acknowledged) == sorted(
        [(first.pk, 1), (first.pk, 2), (first.pk, 3), (second.pk, 1)]
    )
    # Per memory, nothing was sent before the previous event was acknowledged.
    mine = [(v, status) for m, v, status in got if m == first.pk]
    assert [v for v, status in mine if status == 200] == [1, 2, 3]
    for index, (version, _) in enumerate(mine):
        acknowledged_before = {v for v, s in mine[:index] if s == 200}
        assert set(range(1, version)) <= acknowledged_before
    log = list(WebhookDelivery.objects.order_by("position"))
    assert all(d.state == DeliveryState.DELIVERED for d in log)
    assert sorted(d.attempts for d in log) == [1, 1, 2, 2]
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.failing_since is None and endpoint.last_success_at is not None


@pytest.mark.django_db
def test_a_delivery_is_retried_for_24_hours_then_the_endpoint_is_disabled(receiver, tenant, agent):
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    receiver.script = [503] * 100
    store(agent, "a fact")
    when, previous = T0, None
    while True:
        delivery.dispatch_webhooks(now=when)
        row = WebhookDelivery.objects.get()
        if row.state != DeliveryState.PENDING:
            break
        gap = row.next_attempt_at - when
        assert gap <= timedelta(hours=1, minutes=7)
        if previous is not None:
            assert gap >= min(previous * 1.6, timedelta(minutes=54))  # it grows, up to an hour
        previous, when = gap, row.next_attempt_at
    assert row.state == DeliveryState.FAILED and row.last_status == 503
    assert when - T0 >= timedelta(hours=24)
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.disabled_at is not None and "24 hours" in endpoint.disabled_reason
    # Disabled: new events are not fanned out; enabling again sends what came meanwhile.
    store(agent, "another fact")
    assert delivery.dispatch_webhooks(now=when)["created"] == 0
    endpoints.webhook_enable(tenant=tenant, webhook_id=endpoint.pk, now=when)
    receiver.script = []
    assert delivery.dispatch_webhooks(now=when)["delivered"] == 1


@pytest.mark.django_db
def test_resend_sends_a_delivered_event_again(receiver, tenant, agent):
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    store(agent, "a fact")
    delivery.dispatch_webhooks(now=T0)
    (done,) = WebhookDelivery.objects.all()
    endpoints.delivery_resend(tenant=tenant, delivery_id=done.pk, now=T0)
    delivery.dispatch_webhooks(now=T0)
    assert len(receiver.received) == 2
    assert receiver.received[0].body == receiver.received[1].body
    other = make_tenant("globex")
    with pytest.raises(Exception, match="No such delivery"):
        endpoints.delivery_resend(tenant=other, delivery_id=done.pk)


@pytest.fixture
def dns(monkeypatch, settings):
    """A resolver of our own: {host: [addresses]}; sending anything fails the test."""
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = False
    table: dict[str, list[str]] = {}
    monkeypatch.setattr(addresses, "resolve", lambda host, port: table[host])

    def no_connection(*args, **kwargs):
        raise AssertionError("a refused address was connected to")

    monkeypatch.setattr(httpx.Client, "send", no_connection)
    return table


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00::1",
        "::ffff:127.0.0.1",
        "224.0.0.1",
    ],
)
@pytest.mark.django_db
def test_a_host_that_resolves_to_a_non_public_address_is_refused(dns, tenant, address):
    dns["hooks.example.com"] = [address]
    with pytest.raises(InvalidInput, match="loopback, private or link-local"):
        endpoints.webhook_create(
            tenant=tenant, url="https://hooks.example.com/in", actor="operator:a@b.c"
        )


@pytest.mark.django_db
def test_one_private_address_among_public_ones_is_enough_to_refuse(dns, tenant):
    dns["hooks.example.com"] = ["93.184.216.34", "10.0.0.7"]
    with pytest.raises(InvalidInput):
        endpoints.webhook_create(tenant=tenant, url="https://hooks.example.com/", actor="x")


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/",
        "https://user:pw@hooks.example.com/",
        "ftp://x/",
        "https:///x",
        "https://hooks.example.com:99999/",
        "https://hooks example.com/",
    ],
)
@pytest.mark.django_db
def test_urls_other_than_https_to_a_host_are_refused(dns, tenant, url):
    dns["hooks.example.com"] = ["93.184.216.34"]
    with pytest.raises(InvalidInput):
        endpoints.webhook_create(tenant=tenant, url=url, actor="x")


@pytest.mark.django_db
def test_a_host_that_changes_to_a_private_address_after_creation_is_refused_at_delivery(
    dns, tenant, agent
):
    dns["hooks.example.com"] = ["93.184.216.34"]
    endpoints.webhook_create(tenant=tenant, url="https://hooks.example.com/in", actor="x")
    dns["hooks.example.com"] = ["169.254.169.254"]  # DNS rebinding
    store(agent, "a fact")
    counts = delivery.dispatch_webhooks(now=T0)
    assert counts["refused"] == 1
    row = WebhookDelivery.objects.get()
    assert row.state == DeliveryState.PENDING and row.last_status is None
    assert "loopback, private or link-local" in row.last_error


@pytest.mark.django_db
def test_the_connection_goes_to_the_address_that_was_checked(receiver, monkeypatch, tenant, agent):
    """A name that no resolver outside the test knows: the request reaches our receiver only
    because the connection is made to the checked address, the name kept in Host."""
    port = receiver.url.split(":")[2].split("/")[0]
    monkeypatch.setattr(addresses, "resolve", lambda host, p: ["127.0.0.1"])
    endpoints.webhook_create(
        tenant=tenant, url=f"http://hooks.memoryhub.invalid:{port}/in", actor="x"
    )
    store(agent, "a fact")
    assert delivery.dispatch_webhooks(now=T0)["delivered"] == 1
    assert receiver.received[0].headers["Host"] == f"hooks.memoryhub.invalid:{port}"


@pytest.mark.django_db
def test_the_rest_api_needs_admin_shows_the_secret_once_and_isolates_tenants(
    receiver, tenant, agent, key_client
):
    admin = key_client(agent, scopes=["read", "write", "admin"])
    assert key_client(agent).get("/api/v1/webhooks").status_code == 403
    response = admin.post(
        "/api/v1/webhooks",
        {"url": receiver.url, "events": ["review.pending"], "description": "ops"},
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["secret"].startswith("whsec_")
    hook = body["webhook"]
    assert (hook["url"], hook["events"], hook["enabled"]) == (
        receiver.url,
        ["review.pending"],
        True,
    )
    listed = admin.get("/api/v1/webhooks").json()
    assert listed["webhooks"] == [hook] and body["secret"] not in json.dumps(listed)
    assert body["secret"] not in WebhookEndpoint.objects.get().secret_encrypted
    bad = admin.post("/api/v1/webhooks", {"url": receiver.url, "events": ["nope"]}, format="json")
    assert bad.status_code == 400
    outsider = key_client(make_agent(make_tenant("globex"), "bot"), scopes=["admin"])
    assert outsider.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 404
    assert outsider.get("/api/v1/webhooks").json()["webhooks"] == []
    assert admin.delete(f"/api/v1/webhooks/{hook['id']}").json() == {"ok": True, "deleted": True}
    assert admin.delete(f"/api/v1/webhooks/{hook['id']}").status_code == 404


@pytest.mark.django_db
def test_a_create_retried_with_its_idempotency_key_replays_the_endpoint_and_its_secret(
    receiver, tenant, agent, key_client
):
    """The Idempotency-Key of every agent POST on this one too: a client's retry (the TypeScript
    client sends one key on every attempt) must not make a second endpoint whose secret nobody
    saw."""
    admin = key_client(agent, scopes=["admin"])
    body = {"url": receiver.url, "events": ["memory.created"], "description": "ops"}
    headers = {"HTTP_IDEMPOTENCY_KEY": "hook-1"}
    first = admin.post("/api/v1/webhooks", body, format="json", **headers)
    assert first.status_code == 201, first.content
    again = admin.post("/api/v1/webhooks", body, format="json", **headers)
    assert (again.status_code, again.content) == (201, first.content)
    assert WebhookEndpoint.objects.count() == 1
    secret = first.json()["secret"]
    # The kept response holds the secret as the endpoint does: encrypted, never in clear.
    kept = IdempotencyRecord.objects.get(tenant=tenant).response_body
    assert secret not in kept and json.loads(kept)["webhook"] == first.json()["webhook"]
    # The replayed secret is the endpoint's: deliveries are signed with it.
    assert signing.decrypt(WebhookEndpoint.objects.get().secret_encrypted) == secret
    other = admin.post(
        "/api/v1/webhooks", {**body, "description": "other"}, format="json", **headers
    )
    assert other.status_code == 422 and other.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"
    plain = admin.post("/api/v1/webhooks", body, format="json")  # no key: a new endpoint
    assert plain.status_code == 201 and plain.json()["secret"] != secret
    assert WebhookEndpoint.objects.count() == 2


@pytest.mark.django_db
def test_review_pending_reaches_an_endpoint_that_wants_only_it(receiver, tenant, agent):
    endpoints.webhook_create(
        tenant=tenant, url=receiver.url, events=["review.pending"], actor="operator:a@b.c"
    )
    store(agent, "plain fact")
    pending = store(agent, "maybe a fact", capture_mode="inferred")
    delivery.dispatch_webhooks(now=T0)
    (only,) = receiver.received
    body = json.loads(only.body)
    assert (body["type"], body["memory_id"]) == ("review.pending", pending.pk)
    assert (
        body["data"]["review_state"] == "pending" and body["data"]["source"] == "agent:support-bot"
    )


@pytest.mark.django_db
def test_a_user_memorys_event_says_its_scope_and_source_user(receiver, tenant, agent):
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    memory = store(agent, "Ann is allergic to peanuts", scope="user", subject_id="ann")
    own = store(agent, "Prefers email")
    delivery.dispatch_webhooks(now=T0)
    bodies = [json.loads(r.body) for r in receiver.received]
    # Deliveries of different memories may arrive in any order (only one memory's keep theirs).
    assert sorted(
        [(b["memory_id"], b["scope"], b["agent"], b["data"]["source"]) for b in bodies],
        key=lambda row: row[0] != memory.pk,
    ) == [
        (memory.pk, "user", None, "user"),
        (own.pk, "agent", "support-bot", "agent:support-bot"),
    ]
    (user_body,) = [b for b in bodies if b["memory_id"] == memory.pk]
    assert user_body["data"]["scope"] == "user" and user_body["subject_id"] == "ann"


# IPv6 addresses that carry a loopback, private or link-local IPv4 address.
CARRIED_IPV4 = [
    "::127.0.0.1",  # IPv4-compatible
    "::a00:1",  # IPv4-compatible, 10.0.0.1
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:0:127.0.0.1",  # IPv4-translated
    "64:ff9b::7f00:1",  # NAT64, 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64, 169.254.169.254
    "64:ff9b:1::808:808",  # local-use NAT64: never public, whatever it carries
    "2002:7f00:1::",  # 6to4, gateway 127.0.0.1
    "2002:c0a8:101::1",  # 6to4, gateway 192.168.1.1
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:0:a00:1::1",  # Teredo, server 10.0.0.1
]


@pytest.mark.parametrize("address", CARRIED_IPV4)
@pytest.mark.django_db
def test_a_host_that_turns_to_an_ipv6_form_of_a_private_ipv4_is_refused_at_delivery(
    dns, tenant, agent, address
):
    dns["hooks.example.com"] = ["93.184.216.34"]
    endpoints.webhook_create(tenant=tenant, url="https://hooks.example.com/in", actor="x")
    dns["hooks.example.com"] = [address]
    store(agent, "a fact")
    assert delivery.dispatch_webhooks(now=T0)["refused"] == 1
    assert "loopback, private or link-local" in WebhookDelivery.objects.get().last_error


@pytest.mark.parametrize(
    "address", ["::ffff:93.184.216.34", "64:ff9b::5db8:d822", "2002:5db8:d822::1", "2606:4700::1"]
)
@pytest.mark.django_db
def test_an_ipv6_form_of_a_public_ipv4_address_is_allowed(dns, tenant, address):
    dns["hooks.example.com"] = [address]
    endpoints.webhook_create(tenant=tenant, url="https://hooks.example.com/in", actor="x")
    assert WebhookEndpoint.objects.count() == 1


# Numeric spellings of 127.0.0.1 (and 0.0.0.0, ::1) that the system's resolver reads.
LOOPBACK_SPELLINGS = [
    "0x7f000001",
    "127.1",
    "2130706433",
    "0177.0.0.1",
    "127.0.1",
    "017700000001",
    "0x7f.1",
    "127.000.000.001",
    "0",
    "[::1]",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + [f"[{a}]" for a in CARRIED_IPV4])
@pytest.mark.django_db
def test_every_spelling_of_a_non_public_host_is_refused(settings, tenant, host):
    """Written in the URL itself, read by the system's resolver (nothing leaves the machine)."""
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = False
    with pytest.raises(InvalidInput, match="loopback, private or link-local"):
        endpoints.webhook_create(tenant=tenant, url=f"https://{host}/in", actor="x")
    assert not WebhookEndpoint.objects.exists()


@pytest.mark.parametrize(
    ("field", "raw", "named"),
    [
        ("description", b'"ops \\u0000 channel"', "description"),
        ("description", b'"ops \\ud800 channel"', "description"),
        ("description", b'"\\udfff"', "description"),
        ("url", b'"https://hooks.example.com/\\ud800"', "url"),
        ("url", b'"https://hooks.example.com/\\u0000"', "url"),
        ("events", b'["memory.created\\u0000"]', "events[0]"),
        ("events", b'["\\ud800"]', "events[0]"),
    ],
)
@pytest.mark.django_db
def test_a_nul_or_lone_surrogate_in_a_webhook_field_is_invalid_input(
    dns, agent, key_client, field, raw, named
):
    dns["hooks.example.com"] = ["93.184.216.34"]
    fields = {"url": "https://hooks.example.com/in", "events": [], "description": "ops"}
    fields.pop(field)
    body = json.dumps(fields)[:-1].encode() + b', "' + field.encode() + b'": ' + raw + b"}"
    admin = key_client(agent, scopes=["admin"])
    response = admin.post("/api/v1/webhooks", body, content_type="application/json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["details"]["field"]) == ("INVALID_INPUT", named)
    assert not WebhookEndpoint.objects.exists()

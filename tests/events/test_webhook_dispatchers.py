"""Several dispatchers on one database (docs/operations.md#webhooks): a delivery that was sent
and answered is sent once, however slow its receiver and however many dispatchers run; a
dispatcher that dies between a send and its record makes it sent again (at least once), and
one that lost its lease records nothing over another's outcome. Real receivers on 127.0.0.1,
real PostgreSQL, dispatchers on threads with connections of their own."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import pytest

from accounts.principal import Principal
from memories.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from memories.services.changes import memory_update
from memories.webhooks import delivery, endpoints
from tests.support.receivers import Receiver
from tests.support.webhooks import T0, Dispatcher, sent_ids, store, until

PAST_THE_LEASE = delivery.LEASE + timedelta(minutes=1)


def delivered() -> int:
    return WebhookDelivery.objects.filter(state=DeliveryState.DELIVERED).count()


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_outlives_its_lease_is_not_sent_again_by_a_second_dispatcher(
    receiver, clock, settings, tenant, agent
):
    """The receiver holds its first answer; the others come at once. By the clock, the first
    dispatcher's work outlives its lease while it still waits on that answer; a second
    dispatcher runs then, and sends nothing that was sent."""
    settings.MEMORYHUB_WEBHOOK_TIMEOUT = 30  # the held answer is released long before
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    for i in range(12):
        store(agent, f"fact {i}")
    receiver.script = [("hold", 200)]
    first = Dispatcher(lambda: delivery.dispatch_webhooks(run_for=30))
    first.start()
    receiver.wait_for(12)  # all sent, the first one's answer still held
    answered_recorded = until(lambda: delivered() == 11)
    clock.now = T0 + PAST_THE_LEASE
    held = receiver.received[0].headers["MemoryHub-Delivery"]
    lease_renewed = until(lambda: WebhookDelivery.objects.get(pk=held).next_attempt_at > clock.now)

    second = delivery.dispatch_webhooks(run_for=30)
    receiver.gate.set()
    first.finish()

    assert all(times == 1 for times in sent_ids(receiver).values()), sent_ids(receiver)
    assert len(sent_ids(receiver)) == 12
    assert answered_recorded, "each outcome is recorded as its answer comes"
    assert lease_renewed, "the lease of a request still waiting is renewed"
    assert second["delivered"] + second["retry"] + second["refused"] + second["failed"] == 0
    rows = list(WebhookDelivery.objects.all())
    assert {(d.state, d.attempts, d.last_status) for d in rows} == {
        (DeliveryState.DELIVERED, 1, 200)
    }


@pytest.fixture
def receivers(settings):
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    settings.MEMORYHUB_WEBHOOK_TIMEOUT = 10
    started = [Receiver() for _ in range(4)]
    for each in started:
        each.url = each.start()
    yield started
    for each in started:
        each.stop()


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_started_together_deliver_each_of_200_deliveries_once_in_order(
    receivers, tenant, agent
):
    """Four endpoints, 25 memories stored then updated: 200 deliveries. Both dispatchers fan
    out and send at once; each delivery arrives once, each memory's update after its creation."""
    for each in receivers:
        endpoints.webhook_create(tenant=tenant, url=each.url, actor="operator:a@b.c")
    principal = Principal(tenant=tenant, agent=agent)
    memories = [store(agent, f"fact {i}") for i in range(25)]
    for memory in memories:
        memory_update(principal=principal, memory_id=memory.pk, data={"text": "changed"})
    start_line = threading.Barrier(2)
    dispatchers = [
        Dispatcher(lambda: delivery.dispatch_webhooks(now=T0, run_for=60), start_line)
        for _ in range(2)
    ]
    for each in dispatchers:
        each.start()
    counts = [each.finish() for each in dispatchers]

    assert sum(c["created"] for c in counts) == 200
    assert sum(c["delivered"] for c in counts) == 200
    assert all(c.get("lost", 0) == 0 for c in counts)
    times = sent_ids(*receivers)
    assert len(times) == 200 and set(times.values()) == {1}
    for each in receivers:
        arrived = [json.loads(r.body) for r in each.received]
        assert sorted((b["memory_id"], b["version"]) for b in arrived) == sorted(
            (m.pk, version) for m in memories for version in (1, 2)
        )
        for memory in memories:
            assert [b["version"] for b in arrived if b["memory_id"] == memory.pk] == [1, 2]
    rows = list(WebhookDelivery.objects.all())
    assert len(rows) == 200
    assert {(d.state, d.attempts, d.last_status) for d in rows} == {
        (DeliveryState.DELIVERED, 1, 200)
    }


class Crash(Exception):
    """The worker dies: the transaction recording an outcome is aborted."""


@pytest.mark.django_db
def test_a_dispatcher_that_dies_between_send_and_record_makes_the_delivery_sent_again_once(
    receiver, monkeypatch, tenant, agent
):
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    for i in range(3):
        store(agent, f"fact {i}")
    outcome = delivery._endpoint_outcome

    def dies(*args, **kwargs):
        monkeypatch.setattr(delivery, "_endpoint_outcome", outcome)
        raise Crash

    monkeypatch.setattr(delivery, "_endpoint_outcome", dies)
    with pytest.raises(Crash):
        delivery.dispatch_webhooks(now=T0)
    assert len(receiver.received) == 3  # all three were sent; no outcome is recorded
    assert delivered() == 0

    # Until the dead run's lease runs out, nobody sends them again.
    assert delivery.dispatch_webhooks(now=T0 + delivery.LEASE / 2)["delivered"] == 0
    assert len(receiver.received) == 3
    assert delivery.dispatch_webhooks(now=T0 + PAST_THE_LEASE)["delivered"] == 3
    assert delivery.dispatch_webhooks(now=T0 + timedelta(hours=1))["delivered"] == 0

    assert set(sent_ids(receiver).values()) == {2}  # at least once: the same delivery id twice
    rows = list(WebhookDelivery.objects.all())
    assert {(d.state, d.attempts, d.last_status) for d in rows} == {
        (DeliveryState.DELIVERED, 1, 200)
    }


@pytest.mark.django_db(transaction=True)
def test_a_dispatcher_that_lost_its_lease_records_nothing_over_the_outcome_of_the_next(
    receiver, clock, monkeypatch, settings, tenant, agent
):
    """The first dispatcher stalls past its lease (it renews nothing) while its request waits;
    the second takes the delivery and it is delivered. The first one's late 500 is not
    recorded: neither on the delivery nor as a failure of its endpoint."""
    settings.MEMORYHUB_WEBHOOK_TIMEOUT = 30
    monkeypatch.setattr(delivery, "_renew", lambda *args, **kwargs: None, raising=False)
    endpoints.webhook_create(tenant=tenant, url=receiver.url, actor="operator:a@b.c")
    store(agent, "a fact")
    receiver.script = [("hold", 500)]
    stalled = Dispatcher(lambda: delivery.dispatch_webhooks(run_for=30))
    stalled.start()
    receiver.wait_for(1)
    clock.now = T0 + PAST_THE_LEASE
    assert delivery.dispatch_webhooks(run_for=30)["delivered"] == 1
    receiver.gate.set()
    late = stalled.finish()

    row = WebhookDelivery.objects.get()
    assert (row.state, row.attempts, row.last_status) == (DeliveryState.DELIVERED, 1, 200)
    assert late["retry"] == 0 and late.get("lost") == 1
    endpoint = WebhookEndpoint.objects.get()
    assert endpoint.failing_since is None and endpoint.last_success_at == T0 + PAST_THE_LEASE

"""The webhook dispatcher (a django-q2 task: `dispatch_webhooks`).

One run:
1. numbers the committed events (`feed.sequence`);
2. turns each enabled endpoint's new events (after its `cursor`, of the types it wants) into
   pending deliveries, advancing the cursor in the same transaction;
3. sends the deliveries that are due, `SENDERS` requests side by side. A delivery is claimed
   when a sender is free for it, with a lease: its `next_attempt_at` moved `LEASE` ahead in a
   short transaction, the value written being this run's token. The lease of a request still
   going is renewed once a third of it is used. Each outcome is recorded as its request ends,
   in a transaction of its own, and only while the run still holds the lease (the row still
   carries its token): a run that lost its lease (stalled past it, and another run took the
   delivery) records nothing over the other's outcome.

So a delivery that was sent and answered is not sent again in the normal case, however many
dispatchers run. A worker that dies between a send and its record leaves the lease to run out,
and the delivery is sent again: at least once under faults. Receivers tell repeats apart by
`MemoryHub-Delivery`.

Order per memory: a delivery is not sent while an earlier one (a lower position) for the same
endpoint and memory is still pending, so a memory's events arrive in the order of its changes
even across retries. (A resend from the log is outside that order.)

Failures (a status outside 2xx, a timeout, a refused address) are retried after 10 s, 20 s,
40 s … (at most an hour apart, ±10 %) until 24 h after the first attempt, then the delivery is
`failed`. An endpoint whose attempts have all failed for 24 h is disabled (its admins see it on
the dashboard); enabling it again gives its pending deliveries a new 24 h.

The run is nudged after each commit that wrote events for a tenant with webhooks
(`memories.events.record`), and scheduled every minute (the schedule the migrations create) for the rest.
"""

from __future__ import annotations

import logging
import random
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson
from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from memories.events import feed
from memories.models import DeliveryState, Event, WebhookDelivery, WebhookEndpoint
from memories.webhooks import addresses, signing
from memoryhub import metrics
from memoryhub.tls import tls_context

logger = logging.getLogger("memoryhub.webhooks")

RETRY_FOR = timedelta(hours=24)
DISABLE_AFTER = timedelta(hours=24)
FIRST_RETRY = 10.0  # seconds
MAX_RETRY = 3600.0
LEASE = timedelta(minutes=2)  # a claim on a delivery, renewed while its request goes on
RENEW_AFTER = LEASE / 3
TICK = 1.0  # seconds: how often a run waiting on slow requests looks at their leases
FAN_OUT_BATCH = 1000
SENDERS = 8  # requests side by side per run
RUN_FOR = 50.0  # seconds: a scheduled run ends before the next one is due
USER_AGENT = "MemoryHub-Webhooks/1"


def retry_delay(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones."""
    base = min(MAX_RETRY, FIRST_RETRY * 2 ** max(attempts - 1, 0))
    return base * random.uniform(0.9, 1.1)


def dispatch_webhooks(*, now: datetime | None = None, run_for: float = RUN_FOR) -> dict:
    """One run (see the module docstring). Returns counts: deliveries created and sent by
    outcome. `now` (tests) fixes the clock; the deadline is real time."""
    deadline = time.monotonic() + run_for
    while feed.sequence() == feed.SEQUENCE_BATCH and time.monotonic() < deadline:
        pass  # a backlog (a large prune's events) is numbered batch by batch
    counts = {
        "created": fan_out(now=now),
        "delivered": 0,
        "retry": 0,
        "failed": 0,
        "refused": 0,
        "lost": 0,
    }
    _send_due(counts, now=now, deadline=deadline)
    return counts


def fan_out(*, now: datetime | None = None) -> int:
    """Deliveries for every enabled endpoint's new events; returns how many were created."""
    created = 0
    for endpoint_id in WebhookEndpoint.objects.filter(disabled_at__isnull=True).values_list(
        "pk", flat=True
    ):
        while True:
            made, more = _fan_out_one(endpoint_id, now=now or timezone.now())
            created += made
            if not more:
                break
    return created


def _fan_out_one(endpoint_id: str, *, now: datetime) -> tuple[int, bool]:
    with transaction.atomic():
        endpoint = (
            WebhookEndpoint.objects.select_for_update(skip_locked=True)
            .filter(pk=endpoint_id, disabled_at__isnull=True)
            .first()
        )
        if endpoint is None:  # another dispatcher has it, or it went away
            return 0, False
        events = list(
            Event.objects.for_tenant(endpoint.tenant_id)
            .filter(position__gt=endpoint.cursor)
            .order_by("position")
            .values_list("pk", "position", "type", "memory_id")[:FAN_OUT_BATCH]
        )
        if not events:
            return 0, False
        wanted = set(endpoint.events)
        deliveries = [
            WebhookDelivery(
                tenant_id=endpoint.tenant_id,
                endpoint_id=endpoint.pk,
                event_id=pk,
                position=position,  # type: ignore[misc]  # past the cursor: not null
                event_type=event_type,
                memory_id=memory_id,
                created_at=now,
                next_attempt_at=now,
            )
            for pk, position, event_type, memory_id in events
            if not wanted or event_type in wanted
        ]
        WebhookDelivery.objects.bulk_create(deliveries)
        endpoint.cursor = events[-1][1]  # type: ignore[assignment]  # as above
        endpoint.save(update_fields=["cursor"])
    return len(deliveries), len(events) == FAN_OUT_BATCH


def _claim(*, now: datetime, limit: int) -> list[WebhookDelivery]:
    """Up to `limit` due deliveries whose memory has no earlier pending one, leased to this run:
    each one's `next_attempt_at` moved to `now + LEASE`, a value this run keeps (see `_Sending`)."""
    earlier = WebhookDelivery.objects.filter(
        endpoint_id=OuterRef("endpoint_id"),
        memory_id=OuterRef("memory_id"),
        state=DeliveryState.PENDING,
        resend=False,
        position__lt=OuterRef("position"),
    )
    with transaction.atomic():
        due = list(
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .filter(
                state=DeliveryState.PENDING,
                next_attempt_at__lte=now,
                endpoint__disabled_at__isnull=True,
            )
            .filter(Q(resend=True) | Q(memory_id__isnull=True) | ~Exists(earlier))
            .order_by("position", "id")[:limit]
        )
        if due:
            WebhookDelivery.objects.filter(pk__in=[d.pk for d in due]).update(
                next_attempt_at=now + LEASE
            )
    for claimed in due:
        claimed.next_attempt_at = now + LEASE
    return due


@dataclass(frozen=True)
class _Result:
    status: int | None
    error: str
    refused: bool = False

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


def _send_due(counts: dict[str, int], *, now: datetime | None, deadline: float) -> None:
    """Send what is due, `SENDERS` requests side by side, until nothing is due or the run's time
    is up. A delivery is claimed only when a sender is free for it, its outcome is recorded as
    soon as its request ends, and the leases of requests still going are renewed while they go;
    so a slow receiver never lets a lease run out under a delivery that was sent and answered,
    and another run never sends it again."""

    def clock() -> datetime:
        return now or timezone.now()

    sending: dict[Future[_Result], WebhookDelivery] = {}
    claim_more = True
    with ThreadPoolExecutor(max_workers=SENDERS) as pool:
        while True:
            free = SENDERS - len(sending)
            if claim_more and free and time.monotonic() < deadline:
                claimed = _claim(now=clock(), limit=free)
                # Claimed fewer than asked: nothing else is due until an answer lets a memory's
                # next event go (the next run takes the retries that come due meanwhile).
                claim_more = len(claimed) == free
                for claimed_delivery, (endpoint, event) in zip(
                    claimed, _targets(claimed), strict=True
                ):
                    future = pool.submit(_send, claimed_delivery, endpoint, event, now)
                    sending[future] = claimed_delivery
            if not sending:
                return
            done, _ = wait(sending, timeout=TICK, return_when=FIRST_COMPLETED)
            for future in done:
                counts[_record(sending.pop(future), future.result(), now=clock())] += 1
                claim_more = True
            _renew(list(sending.values()), now=clock())


def _targets(
    claimed: list[WebhookDelivery],
) -> list[tuple[WebhookEndpoint | None, Event | None]]:
    """Each claimed delivery's endpoint and event (None: gone meanwhile)."""
    endpoints = {
        e.pk: e for e in WebhookEndpoint.objects.filter(pk__in={d.endpoint_id for d in claimed})
    }
    events = {
        e.pk: e
        for e in Event.objects.filter(pk__in=[d.event_id for d in claimed]).select_related(
            "agent", "tenant"
        )
    }
    return [(endpoints.get(d.endpoint_id), events.get(d.event_id)) for d in claimed]


def _renew(sending: list[WebhookDelivery], *, now: datetime) -> None:
    """Move the lease of each request still going that has used a third of it, each only if
    this run still holds it (its `next_attempt_at` is the value this run wrote)."""
    old = [d for d in sending if d.next_attempt_at - now <= LEASE - RENEW_AFTER]
    if not old:
        return
    with transaction.atomic():
        for delivery in old:
            held = WebhookDelivery.objects.filter(
                pk=delivery.pk,
                state=DeliveryState.PENDING,
                next_attempt_at=delivery.next_attempt_at,
            ).update(next_attempt_at=now + LEASE)
            if held:
                delivery.next_attempt_at = now + LEASE


def body_of(event: Event) -> bytes:
    """A delivery's body: the event object, as the tenant sees it."""
    return orjson.dumps(feed.event_json(event, tenant=event.tenant, viewer=None))


def _send(
    delivery: WebhookDelivery,
    endpoint: WebhookEndpoint | None,
    event: Event | None,
    now: datetime | None,
) -> _Result:
    if endpoint is None or event is None:
        return _Result(None, "the event is no longer kept", refused=True)
    try:
        target = addresses.check(endpoint.url)
        secret = signing.decrypt(endpoint.secret_encrypted)
    except addresses.Refused as exc:
        return _Result(None, f"refused: {exc}", refused=True)
    except signing.SecretUnreadable as exc:
        return _Result(None, str(exc), refused=True)
    body = body_of(event)
    stamp = int((now or timezone.now()).timestamp())
    headers = {
        "Host": target.host_header,
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "MemoryHub-Signature": signing.signature(secret, body, stamp),
        "MemoryHub-Event": event.type,
        "MemoryHub-Delivery": str(delivery.pk),
    }
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    try:
        with httpx.Client(
            timeout=settings.MEMORYHUB_WEBHOOK_TIMEOUT, follow_redirects=False, verify=tls_context()
        ) as client:
            request = client.build_request(
                "POST", target.connect_url, content=body, headers=headers, extensions=extensions
            )
            response = client.send(request)
    except httpx.TimeoutException:
        return _Result(None, "timed out")
    except httpx.HTTPError as exc:
        return _Result(None, f"could not connect ({type(exc).__name__})")
    return _Result(
        response.status_code,
        "" if 200 <= response.status_code < 300 else f"HTTP {response.status_code}",
    )


def _record(delivery: WebhookDelivery, result: _Result, *, now: datetime) -> str:
    """The attempt's outcome on the delivery and its endpoint, in a transaction of its own;
    returns the outcome's name. Only while this run still holds the delivery's lease: a run
    whose lease ran out and was taken by another leaves what that one records alone ("lost")."""
    first = delivery.first_attempt_at or now
    fields: dict[str, Any] = {
        "attempts": delivery.attempts + 1,
        "first_attempt_at": first,
        "last_attempt_at": now,
        "last_status": result.status,
        "last_error": result.error[:300],
    }
    if result.ok:
        outcome = "delivered"
        fields.update(state=DeliveryState.DELIVERED, delivered_at=now)
    elif now - first >= RETRY_FOR:
        outcome = "failed"
        fields["state"] = DeliveryState.FAILED
    else:
        outcome = "refused" if result.refused else "retry"
        fields["next_attempt_at"] = now + timedelta(seconds=retry_delay(fields["attempts"]))
    with transaction.atomic():
        held = WebhookDelivery.objects.filter(
            pk=delivery.pk,
            state=DeliveryState.PENDING,
            next_attempt_at=delivery.next_attempt_at,  # the lease this run wrote
        ).update(**fields)
        if held:
            endpoint = (
                WebhookEndpoint.objects.select_for_update().filter(pk=delivery.endpoint_id).first()
            )
            if endpoint is not None:
                _endpoint_outcome(endpoint, ok=result.ok, now=now)
    if not held:
        logger.warning(
            "webhook delivery %s: this run no longer holds its lease (it ran out and another "
            "run took the delivery); this run's attempt (%s) is not recorded",
            delivery.pk,
            outcome,
        )
        outcome = "lost"
    metrics.count(metrics.WEBHOOK_DELIVERIES, outcome)
    return outcome


def _endpoint_outcome(endpoint: WebhookEndpoint, *, ok: bool, now: datetime) -> None:
    if ok:
        endpoint.failing_since, endpoint.last_success_at = None, now
        endpoint.save(update_fields=["failing_since", "last_success_at"])
        return
    endpoint.failing_since = endpoint.failing_since or now
    fields = ["failing_since"]
    if endpoint.disabled_at is None and now - endpoint.failing_since >= DISABLE_AFTER:
        endpoint.disabled_at = now
        endpoint.disabled_reason = "every delivery failed for 24 hours"
        fields += ["disabled_at", "disabled_reason"]
        logger.warning("webhook %s disabled: failing since %s", endpoint.pk, endpoint.failing_since)
    endpoint.save(update_fields=fields)

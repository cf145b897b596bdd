"""Wake the webhook dispatcher after a commit that wrote events for a tenant with webhooks.

Without this, deliveries would wait for the dispatcher's schedule (every minute). The set of
tenants with enabled endpoints is read at most every `REFRESH` seconds per process (and at once
after a change in this process), so a write of a tenant without webhooks costs no query. Nudges
are throttled to one per `WINDOW` per process, the last one always sent (a timer), so a burst
of writes wakes the dispatcher a few times, not once per write.
"""

from __future__ import annotations

import threading
import time

from django.conf import settings
from django.db import connections, transaction
from django_q.tasks import async_task

from memories.models import WebhookEndpoint

REFRESH = 5.0
WINDOW = 0.5
TASK = "memories.webhooks.delivery.dispatch_webhooks"

_lock = threading.Lock()
_tenants: frozenset[int] = frozenset()
_read_at = float("-inf")
_sent_at = float("-inf")
_trailing: threading.Timer | None = None


def webhook_tenants() -> frozenset[int]:
    global _tenants, _read_at
    now = time.monotonic()
    if now - _read_at >= REFRESH:
        _tenants = frozenset(
            WebhookEndpoint.objects.filter(disabled_at__isnull=True)
            .values_list("tenant_id", flat=True)
            .distinct()
        )
        _read_at = now
    return _tenants


def forget_tenants() -> None:
    """Endpoints changed in this process: read them again at the next write."""
    global _read_at
    _read_at = float("-inf")


def after_commit(tenant_id: int) -> None:
    """Called where events are written (inside the transaction)."""
    if settings.MEMORYHUB_WEBHOOK_NUDGE and tenant_id in webhook_tenants():
        transaction.on_commit(nudge)


def nudge() -> None:
    global _sent_at, _trailing
    with _lock:
        wait = WINDOW - (time.monotonic() - _sent_at)
        if wait > 0:
            if _trailing is None:
                _trailing = threading.Timer(wait, _trailing_nudge)
                _trailing.daemon = True
                _trailing.start()
            return
        _sent_at = time.monotonic()
    async_task(TASK, run_for=10.0)


def _trailing_nudge() -> None:
    global _trailing
    with _lock:
        _trailing = None
    try:
        nudge()
    finally:
        connections.close_all()  # this timer thread's own connection

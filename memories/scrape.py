"""`GET /metrics`: Prometheus text format, for `Authorization: Bearer
<MEMORYHUB_METRICS_TOKEN>` only (a 404 otherwise, and while the token is unset).

The counters and histograms come from every process (`memoryhub.metrics`: prometheus-client's
multiprocess files when `serve` set PROMETHEUS_MULTIPROC_DIR); the gauges that need a query are
read here, at scrape time, cheaply: live memories from the per-owner counters the database
keeps (`OwnerCount`, one row per agent), pending reviews by an index-only count per tenant
(`memory_review_idx`), the queue's depth from django-q2's broker.
"""

from __future__ import annotations

import hmac
import os

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound
from django.views.decorators.http import require_GET
from django_q.brokers import get_broker
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import REGISTRY, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from accounts.models import Tenant
from memories.jobs.backup import backup_status
from memories.models import Memory, OwnerCount

_LIVE = f"""
SELECT t.slug, COALESCE(sum(c.active), 0)
FROM {Tenant._meta.db_table} t
LEFT JOIN {OwnerCount._meta.db_table} c ON c.tenant_id = t.id
GROUP BY t.slug
"""
_PENDING = f"""
SELECT t.slug, (
    SELECT count(*) FROM {Memory._meta.db_table} m
    WHERE m.tenant_id = t.id AND m.status = 'active' AND m.review_state = 'pending'
) FROM {Tenant._meta.db_table} t
"""


class DatabaseGauges:
    """The gauges read at scrape time (a prometheus-client custom collector)."""

    def collect(self):
        live = GaugeMetricFamily(
            "memoryhub_memories_live",
            "Active memories per tenant (those past expires_at until pruning marks them).",
            labels=["tenant"],
        )
        pending = GaugeMetricFamily(
            "memoryhub_reviews_pending",
            "Memories waiting in the review queue, per tenant.",
            labels=["tenant"],
        )
        with connection.cursor() as cursor:
            cursor.execute(_LIVE)
            for slug, n in cursor.fetchall():
                live.add_metric([slug], n)
            cursor.execute(_PENDING)
            for slug, n in cursor.fetchall():
                pending.add_metric([slug], n)
        queue = GaugeMetricFamily(
            "memoryhub_queue_depth", "Tasks waiting in the django-q2 queue (jobs, deliveries)."
        )
        queue.add_metric([], get_broker().queue_size())
        yield from (live, pending, queue)
        backups = backup_status()
        if backups is not None:
            last = backups.last_success_at
            backup = GaugeMetricFamily(
                "memoryhub_backup_last_success_timestamp_seconds",
                "When the last successful scheduled backup finished (Unix time; 0: none yet).",
            )
            backup.add_metric([], last.timestamp() if last is not None else 0)
            yield backup


def _authorized(request: HttpRequest) -> bool:
    token = settings.MEMORYHUB_METRICS_TOKEN
    if not token:
        return False
    given = request.headers.get("Authorization", "")
    return hmac.compare_digest(given.encode(), f"Bearer {token}".encode())


def registry() -> CollectorRegistry:
    """Every process's values (multiprocess mode) or this process's, and the database gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        collected = CollectorRegistry()
        MultiProcessCollector(collected)
    else:
        collected = CollectorRegistry(auto_describe=True)
        collected.register(_ProcessMetrics())
    collected.register(DatabaseGauges())
    return collected


class _ProcessMetrics:
    """This process's own metrics (the default registry's), where there are no others."""

    def collect(self):
        yield from REGISTRY.collect()


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not _authorized(request):
        return HttpResponseNotFound()
    body = generate_latest(registry())
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")

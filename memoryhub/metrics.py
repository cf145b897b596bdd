"""Prometheus metrics (docs/operations.md#monitoring).

The families are defined here, recorded where things happen (requests: `memoryhub.observe`;
embeddings, the LLM, extraction runs, webhook deliveries: their modules) and exposed by
`GET /metrics` (`memories.scrape`, with the gauges that need a query).

Processes. `serve` gives every process it starts (each uvicorn worker, the django-q2 cluster
and its workers) one `PROMETHEUS_MULTIPROC_DIR`, emptied at start: prometheus-client then keeps
each process's values in files there, and a scrape, answered by any one web process, adds them
all up. Without that variable (a single process: `runserver`, tests) the values live in the
process.

Cost. Nothing is measured while MEMORYHUB_METRICS_TOKEN is unset (`/metrics` is a 404 then);
with it, a request adds a counter and a histogram observation (in-process writes to a memory-
mapped file; no database round trip). Labels are bounded: a route is the URL pattern (never
the path with its ids), a method one of the HTTP methods, a status one of the codes.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.db import connections
from prometheus_client import Counter, Gauge, Histogram

# Latencies from a recall (~1 ms) to a slow export or an LLM call.
_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

HTTP_REQUESTS = Counter(
    "memoryhub_http_requests",
    "HTTP requests answered, by route (the URL pattern), method and status code.",
    ["route", "method", "status"],
)
HTTP_DURATION = Histogram(
    "memoryhub_http_request_duration_seconds",
    "Time from a request's arrival to its response's last byte, by route.",
    ["route"],
    buckets=_SECONDS,
)
DB_POOL = Gauge(
    "memoryhub_db_pool_connections",
    "Database pool connections of the web processes: idle, busy, and requests waiting for one.",
    ["state"],
    multiprocess_mode="livesum",
)
EMBED_DURATION = Histogram(
    "memoryhub_embed_duration_seconds",
    "Time to embed one batch of texts (a store, a search query, a re-embed batch).",
    buckets=_SECONDS,
)
EXTRACTION_RUNS = Counter(
    "memoryhub_extraction_runs",
    "Extraction runs finished, by state (done, failed).",
    ["state"],
)
EXTRACTION_TOKENS = Counter(
    "memoryhub_extraction_tokens",
    "Tokens the LLM used for extraction runs, by kind (prompt, completion).",
    ["kind"],
)
LLM_DURATION = Histogram(
    "memoryhub_llm_request_duration_seconds",
    "Time of one call to the LLM (retries included), successful or not.",
    buckets=_SECONDS,
)
WEBHOOK_DELIVERIES = Counter(
    "memoryhub_webhook_deliveries",
    "Webhook delivery attempts, by outcome (delivered, retry, failed, refused, lost).",
    ["outcome"],
)

# Every label value a family is known to take, written at zero when the process starts: a new
# installation's first scrape lists every family (a dashboard shows 0, not "no data", and an alert
# on `rate(...{state="failed"}[5m])` has a series to watch). Under `serve` each process writes its
# zeros to the shared multiprocess files, which add up to zero. The request families get the one
# series that is certain to exist, the scrape's own route.
KNOWN_LABELS: tuple[tuple[Counter | Gauge | Histogram, tuple[tuple[str, ...], ...]], ...] = (
    (HTTP_REQUESTS, (("/metrics", "GET", "200"),)),
    (HTTP_DURATION, (("/metrics",),)),
    (DB_POOL, (("idle",), ("busy",), ("waiting",))),
    (EXTRACTION_RUNS, (("done",), ("failed",))),
    (EXTRACTION_TOKENS, (("prompt",), ("completion",))),
    (WEBHOOK_DELIVERIES, (("delivered",), ("retry",), ("failed",), ("refused",), ("lost",))),
)


def _start_at_zero() -> None:
    for family, values in KNOWN_LABELS:
        for labels in values:
            family.labels(*labels)


_start_at_zero()

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
POOL_EVERY = 1.0  # seconds between two readings of a process's pool
_pool_read_at = 0.0


def enabled() -> bool:
    return bool(settings.MEMORYHUB_METRICS_TOKEN)


def request_done(*, route: str, method: str, status: int, seconds: float) -> None:
    if not enabled():
        return
    method = method if method in METHODS else "other"
    HTTP_REQUESTS.labels(route, method, str(status)).inc()
    HTTP_DURATION.labels(route).observe(seconds)
    _read_pool()


def _read_pool() -> None:
    """The process's pool, at most once a second (its numbers are a gauge: a reading)."""
    global _pool_read_at
    now = time.monotonic()
    if now - _pool_read_at < POOL_EVERY:
        return
    _pool_read_at = now
    pool = getattr(connections["default"], "pool", None)
    if pool is None:
        return
    stats = pool.get_stats()
    size, idle = stats.get("pool_size", 0), stats.get("pool_available", 0)
    DB_POOL.labels("idle").set(idle)
    DB_POOL.labels("busy").set(max(size - idle, 0))
    DB_POOL.labels("waiting").set(stats.get("requests_waiting", 0))


def observe(histogram: Histogram, seconds: float) -> None:
    if enabled():
        histogram.observe(seconds)


def count(counter: Counter, *labels: str, amount: float = 1) -> None:
    if enabled() and amount:
        (counter.labels(*labels) if labels else counter).inc(amount)

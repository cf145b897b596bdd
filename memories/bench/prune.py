"""The pruning figures of `bench` (SPEC §10): rows/s pruning N due memories, and store p95 over
HTTP while a prune runs against its idle value.

`run_prune_bench(scale=..., base_url=..., api_key=...)` returns a dict for bench-results.json.
Without `base_url` it starts its own uvicorn on the same database (hashing embedder) for the
store timings. Run it only against a throwaway database: it inserts `2 × scale` memories.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from memories.bench.server import ApiServer, api_client
from memories.ids import new_ulid
from memories.jobs.prune import prune_memories

INSERT_CHUNK = 100_000

INSERT_SQL = """
INSERT INTO memories_memory (
    id, tenant_id, agent_id, created_by, key, category, kind, text, data, tags, subject_id,
    thread_id, importance, confidence, capture_mode, source_provider, mentions, expires_at,
    last_confirmed_at, created_at, updated_at, last_accessed_at, access_count, version, status,
    status_changed_at, review_state, size_bytes, content_hash, embedding, embedding_model,
    tombstone_reason, tombstoned_by, tombstoned_at, purged_at)
SELECT
    'mem_' || %(prefix)s::text || lpad(g::text, 16, '0'), %(tenant_id)s::bigint,
    %(agent_id)s::bigint, 'system:bench', NULL, %(category)s::text, 'fact',
    %(text)s::text || ' ' || g, NULL, '{}', NULL, %(thread_id)s::text, 0.5, 1.0, 'explicit',
    NULL, '[]', %(expires_at)s::timestamptz, %(updated_at)s::timestamptz,
    %(updated_at)s::timestamptz, %(updated_at)s::timestamptz,
    %(last_accessed_at)s::timestamptz, 0, 1, 'active', NULL, 'none',
    length(%(text)s::text) + 8, md5(%(text)s::text || g), NULL, '', '', '', NULL, NULL
FROM generate_series(%(start)s, %(stop)s) g
"""


def insert_memories(
    *,
    tenant_id: int,
    agent_id: int | None,
    n: int,
    updated_at: datetime,
    category: str = "core",
    expires_at: datetime | None = None,
    last_accessed_at: datetime | None = None,
    thread_id: str | None = None,
    text: str = "bench memory",
) -> int:
    """Insert `n` active memories in SQL (fast enough for a million); returns n."""
    prefix = new_ulid()[-10:]  # the random part: ids stay unique across calls
    params = {
        "prefix": prefix,
        "tenant_id": tenant_id,
        "agent_id": agent_id,
        "category": category,
        "text": text,
        "thread_id": thread_id,
        "expires_at": expires_at,
        "updated_at": updated_at,
        "last_accessed_at": last_accessed_at or updated_at,
    }
    with connection.cursor() as cursor:
        for start in range(1, n + 1, INSERT_CHUNK):
            stop = min(start + INSERT_CHUNK - 1, n)
            cursor.execute(INSERT_SQL, dict(params, start=start, stop=stop))
    return n


def _store_latencies(client, *, count: int | None = None, until: threading.Event | None = None):
    """Time sequential stores (ms): `count` of them, or until `until` is set."""
    samples: list[float] = []
    i = 0
    while (count is not None and i < count) or (until is not None and not until.is_set()):
        body = {"text": f"bench store {time.time_ns()} {i}", "category": "notes"}
        started = time.perf_counter()
        response = client.post("/api/v1/memories", json=body)
        samples.append((time.perf_counter() - started) * 1000)
        if response.status_code not in (200, 201):
            raise RuntimeError(f"store failed during bench: {response.status_code} {response.text}")
        i += 1
    return samples


def _p(samples: list[float], q: int) -> float:
    if len(samples) < 2:
        return samples[0] if samples else float("nan")
    return statistics.quantiles(samples, n=100, method="inclusive")[q - 1]


def run_prune_bench(
    *,
    scale: int = 100_000,
    base_url: str | None = None,
    api_key: str | None = None,
    idle_stores: int = 200,
    workers: int = 2,  # the SPEC's machine has 2 cores
    out: Callable[[str], None] = print,
) -> dict:
    from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create

    tenant = tenant_get_or_create(slug="bench-prune")
    pruned_agent = agent_get_or_create(tenant=tenant, slug="bench-pruned")
    writer = agent_get_or_create(tenant=tenant, slug="bench-writer")
    for agent in (pruned_agent, writer):
        agent.entry_cap = 10 * scale + 10_000  # caps are not what this measures
        agent.save(update_fields=["entry_cap"])
    now = timezone.now()

    def seed() -> None:
        started = time.monotonic()
        insert_memories(
            tenant_id=tenant.pk,
            agent_id=pruned_agent.pk,
            n=scale,
            updated_at=now - timedelta(days=2),
            expires_at=now - timedelta(hours=1),
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memories_memory")
        out(f"prune bench: seeded {scale} due memories in {time.monotonic() - started:.1f}s")

    # 1. Throughput: prune `scale` expired memories with nothing else running.
    seed()
    started = time.monotonic()
    counts = prune_memories(now=now, workers=workers)
    seconds = time.monotonic() - started
    rows_per_second = counts["total"] / seconds if seconds else float("inf")
    out(f"prune bench: pruned {counts['total']} in {seconds:.2f}s ({rows_per_second:,.0f} rows/s)")
    result = {
        "scale": scale,
        "workers": workers,
        "pruned": counts["total"],
        "prune_seconds": round(seconds, 3),
        "prune_rows_per_second": round(rows_per_second),
    }

    # 2. Store p95 over HTTP, idle and while a second prune of `scale` rows runs.
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise

    server = None
    if base_url is None:
        server = ApiServer(Path(settings.DATA_DIR), embedder="hashing")
        base_url = server.base_url
    try:
        if api_key is None:
            _, api_key = api_key_create(tenant=tenant, agent=writer, scopes=["read", "write"])
        if server is not None:
            server.wait_ready()
        with api_client(base_url, api_key) as client:
            _store_latencies(client, count=20)  # warm up connections and caches
            idle = _store_latencies(client, count=idle_stores)
            seed()
            done = threading.Event()
            prune_result: dict = {}

            def prune_in_background():
                try:
                    began = time.monotonic()
                    prune_result["counts"] = prune_memories(now=now, workers=workers)
                    prune_result["seconds"] = time.monotonic() - began
                finally:
                    done.set()
                    connections.close_all()

            thread = threading.Thread(target=prune_in_background)
            thread.start()
            during = _store_latencies(client, until=done)
            thread.join()
    finally:
        if server is not None:
            server.stop()
    result.update(
        {
            "store_p50_idle_ms": round(_p(idle, 50), 2),
            "store_p95_idle_ms": round(_p(idle, 95), 2),
            "store_p50_during_prune_ms": round(_p(during, 50), 2),
            "store_p95_during_prune_ms": round(_p(during, 95), 2),
            "stores_during_prune": len(during),
            "prune_seconds_under_writes": round(prune_result.get("seconds", float("nan")), 3),
        }
    )
    result["store_p95_ratio"] = round(
        result["store_p95_during_prune_ms"] / result["store_p95_idle_ms"], 2
    )
    out(
        f"prune bench: store p95 idle {result['store_p95_idle_ms']} ms, during prune "
        f"{result['store_p95_during_prune_ms']} ms ({result['store_p95_ratio']}x, "
        f"{len(during)} stores)"
    )
    return result

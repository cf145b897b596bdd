"""The pruning figures of `bench`: rows/s pruning N due memories, and store latency
over HTTP while a prune runs against its idle value.

`run_prune_bench(scale=..., base_url=..., api_key=...)` returns a dict for bench-results.json.
Without `base_url` it starts its own uvicorn on the same database (hashing embedder) for the
store timings. Run it only against a throwaway database: it inserts at least `2 × scale` rows.

The measurement is kept clean: the due memories live in a tenant of their own (`bench-prune`)
and every prune here is scoped to it (`prune_memories(tenant_id=...)`), so rows the latency
bench left due elsewhere are never counted, and each prune must change exactly the rows it
seeded (else the bench fails). Stores are timed back to back while the prune runs; when one
prune is over before `samples` stores were timed, another, bigger one is seeded and timed the
same way, until there are `samples` during-prune timings to set against `samples` idle ones.
"""

from __future__ import annotations

import logging
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, connections
from django.utils import timezone

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench.server import api_client
from memories.ids import new_ulid
from memories.jobs.prune import prune_memories
from memoryhub.throwaway import ApiServer

INSERT_CHUNK = 100_000

INSERT_SQL = """
INSERT INTO memories_memory (
    id, tenant_id, agent_id, created_by, key, category, kind, text, data, tags, subject_id,
    thread_id, importance, confidence, capture_mode, source_provider, mentions, expires_at,
    last_confirmed_at, created_at, updated_at, last_accessed_at, access_count, version, status,
    status_changed_at, review_state, size_bytes, content_hash, embedding_model,
    tombstone_reason, tombstoned_by, tombstoned_at, purged_at)
SELECT
    'mem_' || %(prefix)s::text || lpad(g::text, 16, '0'), %(tenant_id)s::bigint,
    %(agent_id)s::bigint, 'system:bench', NULL, %(category)s::text, 'fact',
    %(text)s::text || ' ' || g, NULL, '{}', NULL, %(thread_id)s::text, 0.5, 1.0, 'explicit',
    NULL, '[]', %(expires_at)s::timestamptz, %(updated_at)s::timestamptz,
    %(updated_at)s::timestamptz, %(updated_at)s::timestamptz,
    %(last_accessed_at)s::timestamptz, 0, 1, 'active', NULL, 'none',
    length(%(text)s::text) + 8, md5(%(text)s::text || g), '', '', '', NULL, NULL
FROM generate_series(%(start)s::int, %(stop)s::int) g
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
    params: dict[str, Any] = {
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


class _DueRows:
    """Seeds due memories into the bench tenant and prunes exactly them."""

    def __init__(self, *, tenant_id: int, agent_id: int, now: datetime, workers: int, out):
        self.tenant_id, self.agent_id, self.now = tenant_id, agent_id, now
        self.workers, self.out = workers, out

    def seed(self, n: int) -> int:
        started = time.monotonic()
        insert_memories(
            tenant_id=self.tenant_id,
            agent_id=self.agent_id,
            n=n,
            updated_at=self.now - timedelta(days=2),
            expires_at=self.now - timedelta(hours=1),
        )
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memories_memory")
        self.out(f"prune bench: seeded {n} due memories in {time.monotonic() - started:.1f}s")
        return n

    def prune(self, seeded: int) -> float:
        """Prune the tenant; returns the seconds it took. Fails unless exactly `seeded` changed."""
        started = time.monotonic()
        counts = prune_memories(now=self.now, workers=self.workers, tenant_id=self.tenant_id)
        seconds = time.monotonic() - started
        if counts["total"] != seeded or counts["expired"] != seeded:
            raise RuntimeError(f"prune bench: seeded {seeded} due memories but counts are {counts}")
        return seconds


def run_prune_bench(
    *,
    scale: int = 100_000,
    base_url: str | None = None,
    api_key: str | None = None,
    samples: int = 200,
    workers: int = 2,  # the reference machine has 2 cores
    max_rounds: int = 5,
    out: Callable[[str], None] = print,
) -> dict:
    tenant = tenant_get_or_create(slug="bench-prune")
    pruned_agent = agent_get_or_create(tenant=tenant, slug="bench-pruned")
    writer = agent_get_or_create(tenant=tenant, slug="bench-writer")
    for agent in (pruned_agent, writer):
        agent.entry_cap = 100_000_000  # caps are not what this measures
        agent.save(update_fields=["entry_cap"])
    due = _DueRows(
        tenant_id=tenant.pk, agent_id=pruned_agent.pk, now=timezone.now(), workers=workers, out=out
    )

    # 1. Throughput: prune `scale` expired memories with nothing else running.
    seconds = due.prune(due.seed(scale))
    rows_per_second = scale / seconds if seconds else float("inf")
    out(f"prune bench: pruned {scale} of {scale} in {seconds:.2f}s ({rows_per_second:,.0f} rows/s)")
    result = {
        "scale": scale,
        "workers": workers,
        "tenant": tenant.slug,
        "pruned": scale,
        "prune_seconds": round(seconds, 3),
        "prune_rows_per_second": round(rows_per_second),
    }

    # 2. Store latency over HTTP: `samples` idle stores, then at least `samples` stores timed
    # back to back while prunes run.
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per request otherwise
    server = None
    if base_url is None:
        server = ApiServer(Path(settings.DATA_DIR), embedder="hashing")
        base_url = server.base_url
    during: list[float] = []
    rounds: list[dict] = []
    try:
        if api_key is None:
            _, api_key = api_key_create(tenant=tenant, agent=writer, scopes=["read", "write"])
        if server is not None:
            server.wait_ready()
        with api_client(base_url, api_key) as client:
            # Idle means idle: no autovacuum still busy with the first prune's dead rows.
            with connection.cursor() as cursor:
                cursor.execute("VACUUM (ANALYZE) memories_memory, memories_memoryrevision")
            _store_latencies(client, count=20)  # warm up connections and caches
            idle = _store_latencies(client, count=samples)
            rate = rows_per_second
            while len(during) < samples and len(rounds) < max_rounds:
                # Enough due rows for the stores still missing to fit in one prune, with room
                # for stores slowed down by it.
                store_seconds = statistics.mean(during or idle) / 1000
                wanted = 1.5 * (samples - len(during)) * store_seconds * rate
                seeded = due.seed(max(scale, int(wanted)))
                timed, seconds = _stores_during_prune(client, due, seeded)
                during += timed
                rate = seeded / seconds
                rounds.append(
                    {"pruned": seeded, "seconds": round(seconds, 3), "stores": len(timed)}
                )
                out(
                    f"prune bench: pruned {seeded} in {seconds:.2f}s under stores "
                    f"({rate:,.0f} rows/s), {len(timed)} stores timed meanwhile"
                )
    finally:
        if server is not None:
            server.stop()
    result.update(
        {
            "stores_idle": len(idle),
            "store_p50_idle_ms": round(_p(idle, 50), 2),
            "store_p95_idle_ms": round(_p(idle, 95), 2),
            "stores_during_prune": len(during),
            "store_p50_during_prune_ms": round(_p(during, 50), 2),
            "store_p95_during_prune_ms": round(_p(during, 95), 2),
            "prune_rounds_under_stores": rounds,
        }
    )
    result["store_p50_ratio"] = round(_p(during, 50) / _p(idle, 50), 2)
    result["store_p95_ratio"] = round(_p(during, 95) / _p(idle, 95), 2)
    _print_table(result, out)
    return result


def _stores_during_prune(client, due: _DueRows, seeded: int) -> tuple[list[float], float]:
    """Time stores back to back while a prune of `seeded` rows runs in a thread."""
    done = threading.Event()
    outcome: dict = {}

    def prune_in_background():
        try:
            outcome["seconds"] = due.prune(seeded)
        except BaseException as exc:  # re-raised below, in the bench's thread
            outcome["error"] = exc
        finally:
            done.set()
            connections.close_all()  # this thread's connections only

    thread = threading.Thread(target=prune_in_background)
    thread.start()
    try:
        timed = _store_latencies(client, until=done)
    finally:
        thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return timed, outcome["seconds"]


def _print_table(result: dict, out: Callable[[str], None]) -> None:
    verdict = "ok" if result["store_p95_ratio"] <= 3 else "MISSED"
    under = result["prune_rounds_under_stores"]
    pruned = sum(r["pruned"] for r in under)
    seconds = sum(r["seconds"] for r in under)
    out("")
    out(f"pruning (tenant {result['tenant']} only, {result['workers']} workers)")
    out(f"{'':<26}{'rows':>10}{'seconds':>10}{'rows/s':>10}")
    out(
        f"{'no writes':<26}{result['pruned']:>10}{result['prune_seconds']:>10.2f}"
        f"{result['prune_rows_per_second']:>10,}"
    )
    out(f"{'under stores':<26}{pruned:>10}{seconds:>10.2f}{round(pruned / seconds):>10,}")
    out(f"{'store over HTTP':<26}{'n':>10}{'p50 ms':>10}{'p95 ms':>10}")
    out(
        f"{'idle':<26}{result['stores_idle']:>10}{result['store_p50_idle_ms']:>10.2f}"
        f"{result['store_p95_idle_ms']:>10.2f}"
    )
    out(
        f"{'during prune':<26}{result['stores_during_prune']:>10}"
        f"{result['store_p50_during_prune_ms']:>10.2f}{result['store_p95_during_prune_ms']:>10.2f}"
    )
    out(
        f"store during/idle: p50 {result['store_p50_ratio']}x, p95 {result['store_p95_ratio']}x "
        f"(target p95 <= 3x: {verdict})"
    )
    out("")

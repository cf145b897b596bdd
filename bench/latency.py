"""Latency over real HTTP: store, recall by key, list, search (each mode), hydrate.

Synthetic memories are bulk-loaded with COPY (loading is not what is measured), spread over
agents of 10k memories each so the measured agent always has 10k memories while the tenant
grows to the scale. Embeddings come from the hashing embedder, the one the targets name.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from bench.load_client import Client
from bench.server import Progress
from memories.embeddings import HashingEmbedder
from memories.fingerprints import content_hash
from memories.ids import new_ulid
from memories.models.memory import VECTOR_COLUMNS
from memoryhub.supervisor import available_cores

PER_AGENT = 10_000

NAMES = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "niaj",
    "olivia",
    "peggy",
    "rupert",
    "sybil",
    "trent",
    "victor",
    "walter",
    "yolanda",
    "zoe",
    "colby",
    "dana",
    "emil",
    "farah",
]
VERBS = [
    "prefers",
    "likes",
    "bought",
    "returned",
    "ordered",
    "booked",
    "cancelled",
    "visited",
    "reported",
    "asked-about",
    "recommended",
    "reviewed",
    "upgraded",
    "downgraded",
    "renewed",
]
THINGS = [
    "espresso machine",
    "hiking boots",
    "annual plan",
    "window seat",
    "vegan menu",
    "blue sedan",
    "standing desk",
    "noise-cancelling headphones",
    "family suite",
    "express shipping",
    "paper invoices",
    "dark mode",
    "weekly newsletter",
    "gluten-free bread",
    "spare charger",
    "premium support",
    "rooftop table",
    "mountain bike",
    "winter tyres",
    "french lessons",
]
PLACES = [
    "Lisbon",
    "Berlin",
    "Osaka",
    "Denver",
    "Nairobi",
    "Quito",
    "Oslo",
    "Perth",
    "Austin",
    "Seville",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

COLUMNS = (
    "id, tenant_id, agent_id, created_by, key, category, kind, text, data, tags, subject_id, "
    "thread_id, importance, confidence, capture_mode, source_provider, mentions, expires_at, "
    "last_confirmed_at, created_at, updated_at, last_accessed_at, access_count, version, status, "
    "status_changed_at, review_state, size_bytes, content_hash, embedding_model, "
    "tombstone_reason, tombstoned_by, tombstoned_at, purged_at"
)
# Indexes rebuilt after a bulk load instead of maintained row by row.
BULK_INDEXES = (
    "memory_vector_hnsw",
    "memory_vector_owner_idx",
    "memory_fts_owner_idx",
    "memory_fts_workspace_idx",
)


def fact(rng: random.Random, i: int) -> str:
    return (
        f"{rng.choice(NAMES).title()} {rng.choice(VERBS).replace('-', ' ')} the "
        f"{rng.choice(THINGS)} in {rng.choice(PLACES)} on {rng.choice(DAYS)} (note {i})."
    )


def query_text(rng: random.Random) -> str:
    return f"what did {rng.choice(NAMES)} say about the {rng.choice(THINGS)}"


def _category(i: int) -> tuple[str, str | None]:
    slot = i % 20
    if slot < 2:
        return "core", None
    if slot < 10:
        return "daily", None
    if slot < 16:
        return "notes", None
    if slot < 18:
        return "archival", None
    if slot == 18:
        return "conversation", f"thread-{i % 50}"
    return "workspace", None


def _vector_text(vector: list[float]) -> str:
    return "[" + ",".join("0" if v == 0 else f"{v:.5f}" for v in vector) + "]"


def key_for(agent_index: int, i: int) -> str:
    return f"pref-{agent_index}-{i}"


SEED_CHUNK = 256  # texts embedded in one call while seeding
COPY_CHUNK = 20_000  # memories (and then their vectors) written by one COPY


def seed_agent(
    *,
    tenant_id: int,
    agent_id: int,
    agent_index: int,
    count: int,
    progress,
    embedder=None,
    text: Callable[[random.Random, int], str] = fact,
    kind: str = "fact",
    data: Callable[[int], dict] | None = None,
) -> None:
    """COPY `count` synthetic memories for one agent (workspace ones belong to the tenant),
    their texts made by `text(rng, index)` (`fact` by default), embedded by `embedder` (the
    hashing one by default) a chunk at a time."""
    rng = random.Random(agent_index)
    embedder = embedder or HashingEmbedder()
    now = timezone.now()
    texts = [text(rng, i) for i in range(count)]
    sql = f"COPY memories_memory ({COLUMNS}) FROM STDIN"
    vector_sql = f"COPY memories_memoryvector ({VECTOR_COLUMNS}) FROM STDIN"
    # A COPY per `COPY_CHUNK` memories, then one of their vectors: few statements (the memory
    # table's statement triggers run once per COPY), and a bounded share of the vectors held.
    vectors: list = []
    batch_start = 0
    for first in range(0, count, COPY_CHUNK):
        rows: list[tuple] = []
        vector_rows: list[tuple] = []
        for i in range(first, min(first + COPY_CHUNK, count)):
            if (i - first) % SEED_CHUNK == 0:
                vectors = embedder.embed(texts[i : i + SEED_CHUNK])
                batch_start = i
            body = texts[i]
            category, thread_id = _category(i)
            owner = None if category == "workspace" else agent_id
            keyed = i % 5 == 0 and category not in ("workspace", "conversation")
            subject = f"user-{i % 100}" if i % 3 == 0 and owner is not None else None
            when = now - timedelta(seconds=(count - i) * 30)
            value = data(i) if data is not None else None
            memory_id = "mem_" + new_ulid(int(when.timestamp() * 1000))
            rows.append(
                (
                    memory_id,
                    tenant_id,
                    owner,
                    "system:bench",
                    key_for(agent_index, i) if keyed else None,
                    category,
                    kind,
                    body,
                    json.dumps(value) if value is not None else None,
                    [rng.choice(("crm", "billing", "travel", "support"))],
                    subject,
                    thread_id,
                    0.5,
                    1.0,
                    "explicit",
                    None,
                    "[]",
                    None,
                    when,
                    when,
                    when,
                    when,
                    0,
                    1,
                    "active",
                    None,
                    "none",
                    len(body.encode()),
                    content_hash(body, value),
                    embedder.model_name,
                    "",
                    "",
                    None,
                    None,
                )
            )
            vector_rows.append(
                (
                    memory_id,
                    tenant_id,
                    owner,
                    subject,
                    embedder.model_name,
                    _vector_text(vectors[i - batch_start]),
                )
            )
            if i % 1000 == 999:
                progress.advance(1000)
        with connection.cursor() as cursor:
            with cursor.cursor.copy(sql) as copy:
                for row in rows:
                    copy.write_row(row)
            with cursor.cursor.copy(vector_sql) as copy:
                for row in vector_rows:
                    copy.write_row(row)
    progress.advance(count % 1000)


def _index_definitions() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname = ANY(%s)",
            [list(BULK_INDEXES)],
        )
        return dict(cursor.fetchall())


def bulk_load(jobs: list[dict], out: Callable[[str], None]) -> float:
    """Load every job's memories with the bulk indexes dropped, then rebuild and ANALYZE."""
    started = time.monotonic()
    definitions = _index_definitions()
    with connection.cursor() as cursor:
        for name in definitions:
            cursor.execute(f"DROP INDEX {name}")
    total = sum(job["count"] for job in jobs)
    progress = Progress("loading synthetic memories", total)
    for job in jobs:
        seed_agent(progress=progress, **job)
    progress.close()
    index_started = time.monotonic()
    with connection.cursor() as cursor:
        # Two on a 2-core machine (as measured there), one fewer than the cores on a bigger one
        # (16 cores: the 1M HNSW build took 176 s with two); PostgreSQL's max_worker_processes
        # (8) bounds it anyway.
        workers = max(2, min(available_cores() - 1, 7))
        cursor.execute(f"SET max_parallel_maintenance_workers = {workers}")
        # The HNSW build is several times slower once its graph outgrows this (1M vectors of
        # 384 dimensions take ~2 GB); a session setting, for the rebuild only.
        cursor.execute("SET maintenance_work_mem = '3GB'")
        for definition in definitions.values():
            cursor.execute(definition)
        cursor.execute("VACUUM ANALYZE memories_memory")
        cursor.execute("VACUUM ANALYZE memories_memoryvector")
    out(f"indexes rebuilt in {time.monotonic() - index_started:.1f}s")
    checkpoint(out)
    prewarm(out)
    return time.monotonic() - started


def checkpoint(out: Callable[[str], None]) -> None:
    """Write out what the load left dirty now, rather than under the measurements: a bulk load
    of 1M memories and its index rebuilds leave gigabytes of dirty buffers, which the
    checkpointer otherwise spreads over the next minutes, on the same two cores."""
    started = time.monotonic()
    with connection.cursor() as cursor:
        try:
            cursor.execute("CHECKPOINT")
        except Exception as exc:  # noqa: BLE001 - an external server's role may not allow it
            out(f"checkpoint skipped: {exc}")
            return
    out(f"checkpoint after the load in {time.monotonic() - started:.1f}s")


# The tables `prewarm` reads, with their indexes.
PREWARMED = ["memories_memoryvector", "memories_memory"]
# The share of shared_buffers `prewarm` fills, leaving room for what the requests bring in.
PREWARM_SHARE = 0.8


def prewarm(out: Callable[[str], None]) -> list[str]:
    """Read the memories' and their vectors' tables and indexes into shared buffers, as far as
    they fit: the HNSW index first (its walk touches pages all over it), then the vectors, the
    memories, then the other indexes, largest first. Returns the relations read.

    A bulk load and an index rebuild leave them out of the buffers, while a server that has been
    serving holds its hot pages; without this, a 1M-memory tenant's first few hundred searches
    each copy thousands of pages in from the operating system's cache, and the latencies
    measured are a cold start's. (A restarted server gets the same from `pg_prewarm`'s
    autoprewarm.)"""
    started = time.monotonic()
    with connection.cursor() as cursor:
        try:
            cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        except Exception as exc:  # noqa: BLE001 - an external server may not allow it
            out(f"prewarm skipped: {exc}")
            return []
        cursor.execute(
            "SELECT setting::bigint * pg_size_bytes(unit) FROM pg_settings "
            "WHERE name = 'shared_buffers'"
        )
        room = int(cursor.fetchone()[0] * PREWARM_SHARE)
        cursor.execute(
            "SELECT c.oid::regclass::text, pg_relation_size(c.oid) FROM pg_class c "
            "WHERE c.oid = ANY(%s::regclass[]) OR c.oid IN "
            "(SELECT indexrelid FROM pg_index WHERE indrelid = ANY(%s::regclass[])) "
            "ORDER BY c.relname <> 'memory_vector_hnsw', c.relname <> 'memories_memoryvector', "
            "c.relkind <> 'r', "
            "pg_relation_size(c.oid) DESC, 1",
            [PREWARMED, PREWARMED],
        )
        loaded, names = 0, []
        for name, size in cursor.fetchall():
            if loaded + size > room:
                continue
            cursor.execute("SELECT pg_prewarm(%s::regclass)", [name])
            loaded += size
            names.append(name)
    out(
        f"prewarmed {loaded / 2**20:.0f} MB ({len(names)} of the table and its indexes) into "
        f"shared buffers ({room / 2**20:.0f} MB allowed) in {time.monotonic() - started:.1f}s"
    )
    return names


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)

    def pick(q: float) -> float:
        if not ordered:
            return float("nan")
        index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
        return round(ordered[index], 2)

    return {
        "n": len(ordered),
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": round(statistics.fmean(ordered), 2) if ordered else None,
    }


def _timed(client: Client, request: Callable, n: int, warmup: int) -> list[float]:
    samples = []
    for i in range(warmup + n):
        started = time.perf_counter()
        status = request(client, i)
        elapsed = (time.perf_counter() - started) * 1000
        if status >= 400:
            detail = client.body[:500].decode(errors="replace")
            raise RuntimeError(f"bench request failed: {status} {detail}")
        if i >= warmup:
            samples.append(elapsed)
    return samples


def recallable_keys(agent_index: int, count: int) -> list[str]:
    """The keys `seed_agent` gave the agent's own subject-less memories (what a recall by key
    without a subject finds)."""
    keys = [key_for(agent_index, i) for i in range(0, count, 5) if i % 20 not in (18, 19)]
    return [k for k in keys if int(k.rsplit("-", 1)[1]) % 3 != 0]


def measure(
    *, base_url: str, key: str, agent_index: int, count: int, requests: int, seed: int = 7
) -> dict:
    """p50/p95/p99 (ms) of each operation against the agent `agent_index` (sequential calls)."""
    rng = random.Random(seed)
    keys = recallable_keys(agent_index, count)
    queries = [query_text(rng) for _ in range(requests + 20)]
    warmup = min(10, requests)
    ops: dict[str, Callable[[Client, int], int]] = {
        "store": lambda c, i: c.request(
            "POST", "/api/v1/memories", {"text": f"bench store {time.time_ns()} {fact(rng, i)}"}
        ),
        # Into one of ten threads: the store plus the upkeep of its neighbours' links.
        "store_in_thread": lambda c, i: c.request(
            "POST",
            "/api/v1/memories",
            {"text": f"bench store {time.time_ns()} {fact(rng, i)}", "thread_id": f"t-{i % 10}"},
        ),
        "recall_by_key": lambda c, i: c.request(
            "GET", f"/api/v1/memories/by-key/{rng.choice(keys)}"
        ),
        "list": lambda c, i: c.request("GET", "/api/v1/memories?limit=50"),
        "search_hybrid": lambda c, i: c.request(
            "POST", "/api/v1/search", {"query": queries[i % len(queries)], "mode": "hybrid"}
        ),
        "search_semantic": lambda c, i: c.request(
            "POST", "/api/v1/search", {"query": queries[i % len(queries)], "mode": "semantic"}
        ),
        "search_keyword": lambda c, i: c.request(
            "POST", "/api/v1/search", {"query": queries[i % len(queries)], "mode": "keyword"}
        ),
        "hydrate": lambda c, i: c.request("POST", "/api/v1/hydrate", {}),
    }
    # The load bench's client (http.client, one keep-alive connection): httpx's own work was
    # ~1 ms of a hydrate's 75 KB answer, timed as if it were the server's.
    client = Client(base_url, key)
    try:
        return {
            name: percentiles(_timed(client, request, requests, warmup))
            for name, request in ops.items()
        }
    finally:
        client.close()


TARGETS = {
    # The latency bars (docs/benchmarks.md#targets; hashing embedder): (operation, statistic, ms,
    # at scale)
    "recall_by_key": ("p50", 3.0, 100_000),
    "store": ("p50", 10.0, 100_000),
    "search_hybrid": ("p95", 30.0, 100_000),
    "hydrate": ("p95", 10.0, None),
}

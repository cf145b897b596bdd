"""The memory-formation figures of `bench` (docs/formation.md):

- **ingest**: `POST /api/v1/threads/{thread_id}/messages` with 10-message batches (`"extract":
  "off"`) over real HTTP, one client, back to back: p50/p95/p99 per batch and messages/s.
  Target: p50 ≤ 15 ms. Any answer but 202 fails the bench, a 404 included: the bench starts
  the very build it measures, which has the route, so a 404 is a defect of the bench.
- **extraction server time**: with `threads` threads of 10 messages each in the tenant, one
  extraction run per thread (`run_request` + `run_execute`, as the worker does) against a
  stand-in model that answers at once (`memories/formation/standin_llm.py`: one `add` per run
  citing its messages); reported is each run's `server_ms` (ours; `llm_ms`, the model's, is excluded by
  the run itself), and where it goes: window read, related-memories search, apply (operations
  through the services, and the commit), summary check, and the rest (run bookkeeping).
  Target: p50 ≤ 50 ms at 1,000 threads.

Both figures also give the on-CPU time behind them (`cpu.py`, Linux schedstat): of the web
process and its PostgreSQL backends per ingest batch, and of the run (this process's thread,
the model call excluded, and its PostgreSQL backend) per extraction run, with the time they
waited for a CPU. On a machine busy with other work the wall times mostly measure that wait;
the on-CPU time is what the code needs (a lower bound of its wall time on an idle machine).

Run it only against a throwaway database. The runs execute in this process, on the
`embedder` given (hashing by default, the embedder the latency targets name).
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from functools import wraps

from django.conf import settings
from django.db import connection

from accounts.principal import Principal
from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import cpu
from bench.latency import fact, percentiles
from bench.server import Progress, api_client
from memories.embeddings import get_embedder, reset_embedder
from memories.formation import runs
from memories.formation.ingest import thread_messages_add
from memories.formation.llm import LLMClient
from memories.formation.standin_llm import StandInLLM
from memories.models import ExtractionRun, RunState, Thread
from memoryhub.throwaway import ApiServer

BATCH = 10  # messages per ingest batch
MESSAGES_PER_THREAD = 10
INGEST_WARMUP = 10
EXTRACTION_WARMUP = 5
TARGETS = {
    # (statistic, ms): formation's targets (docs/benchmarks.md#formation)
    "ingest": ("p50", 15.0),
    "extraction_server": ("p50", 50.0),
}
# The phases of `run_execute` timed apart (names in memories.formation.runs).
PHASES = {
    "window": "message_window",
    "related": "related_memories",
    "apply": "apply_operations",
    "summary": "_summarise_if_due",
}


def _batch(rng_index: int, start: int) -> list[dict]:
    rng = random.Random(rng_index)
    return [
        {
            "role": "user" if (start + i) % 2 == 0 else "assistant",
            "content": f"{fact(rng, start + i)} (message {start + i} of batch {rng_index})",
        }
        for i in range(BATCH)
    ]


# --- ingest over HTTP ---------------------------------------------------------------------------


def run_ingest_bench(
    *, data_dir, batches: int, out: Callable[[str], None], server: ApiServer | None = None
) -> dict:
    """Time `batches` 10-message batches through the REST endpoint of `server` (hashing
    embedder; its own when not given). Threads take 10 batches each, so seqs grow as in a real
    conversation; the agent is in a tenant of its own (`bench-ingest`)."""
    tenant = tenant_get_or_create(slug="bench-ingest")
    agent = agent_get_or_create(tenant=tenant, slug="ingest")
    _, key = api_key_create(tenant=tenant, agent=agent, scopes=["read", "write"])
    if server is None:
        with ApiServer(data_dir, embedder="hashing") as own:
            return _ingest(own.base_url, key, batches, out, server_pid=own.process.pid)
    return _ingest(server.base_url, key, batches, out, server_pid=server.process.pid)


def _server_backends() -> list[int]:
    """PostgreSQL backends of other processes (the web server's pool)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        )
        return [row[0] for row in cursor.fetchall()]


def _ingest(
    base_url: str,
    key: str,
    batches: int,
    out: Callable[[str], None],
    server_pid: int | None = None,
) -> dict:
    warmup = min(INGEST_WARMUP, batches)
    samples: list[float] = []
    cpu_before: dict = {}
    pids: list[int] = []
    with api_client(base_url, key) as client:
        for i in range(warmup + batches):
            if i == warmup and server_pid is not None:
                pids = [server_pid, *_server_backends()]
                cpu_before = cpu.processes_ns(pids)
            thread_id = f"ingest-{i // 10}"
            body = {"messages": _batch(i, (i % 10) * BATCH), "extract": "off"}
            started = time.perf_counter()
            response = client.post(f"/api/v1/threads/{thread_id}/messages", json=body)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status_code != 202:
                raise RuntimeError(
                    f"ingest bench request failed: {response.status_code} {response.text[:500]}"
                )
            accepted = response.json().get("accepted")
            if accepted != BATCH:
                raise RuntimeError(f"ingest bench: {accepted} of {BATCH} messages accepted")
            if i >= warmup:
                samples.append(elapsed)
    server_cpu = wait = None
    if cpu_before and samples:
        after = cpu.processes_ns(sorted({*pids, *_server_backends()}))
        run_ms, wait_ms = cpu.delta_ms(cpu_before, after)
        server_cpu, wait = round(run_ms / len(samples), 2), round(wait_ms / len(samples), 2)
    stats = percentiles(samples)
    seconds = sum(samples) / 1000
    return {
        "batch_size": BATCH,
        "batches": len(samples),
        **stats,
        "messages_per_second": round(BATCH * len(samples) / seconds, 1) if seconds else None,
        "clients": 1,
        "server_cpu_ms_per_batch": server_cpu,
        "server_cpu_wait_ms_per_batch": wait,
    }


# --- extraction server time ---------------------------------------------------------------------


@contextlib.contextmanager
def _embedder(name: str) -> Iterator[None]:
    saved = settings.MEMORYHUB_EMBEDDER
    settings.MEMORYHUB_EMBEDDER = name
    reset_embedder()
    try:
        yield
    finally:
        settings.MEMORYHUB_EMBEDDER = saved
        reset_embedder()


@contextlib.contextmanager
def phase_timers() -> Iterator[dict[str, list[float]]]:
    """Time the phases of `run_execute` (ms per call, by phase name) while inside."""
    timings: dict[str, list[float]] = defaultdict(list)
    saved = {name: getattr(runs, attr) for name, attr in PHASES.items()}

    def timed(name: str, function: Callable) -> Callable:
        @wraps(function)
        def wrapper(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timings[name].append((time.perf_counter() - started) * 1000)

        return wrapper

    for name, attr in PHASES.items():
        setattr(runs, attr, timed(name, saved[name]))
    try:
        yield timings
    finally:
        for name, attr in PHASES.items():
            setattr(runs, attr, saved[name])


class _MeteredClient(LLMClient):
    """The model client, counting this thread's on-CPU time inside model calls (the client's
    own work, which `llm_ms` holds and the run's `server_ms` leaves out)."""

    cpu_ns = wait_ns = 0

    def _metered(self, call, **kwargs):
        before = cpu.thread_ns()
        try:
            return call(**kwargs)
        finally:
            after = cpu.thread_ns()
            if before is not None and after is not None:
                self.cpu_ns += after[0] - before[0]
                self.wait_ns += after[1] - before[1]

    def extract(self, **kwargs):
        return self._metered(super().extract, **kwargs)

    def summarize(self, **kwargs):
        return self._metered(super().summarize, **kwargs)


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def _run_metered(run_id: int, client: _MeteredClient) -> tuple[float, float] | None:
    """Execute the run; (on-CPU ms, run-queue wait ms) of it: this thread outside the model
    call, and its PostgreSQL backend. None where /proc does not say."""
    pid = _backend_pid()
    client.cpu_ns = client.wait_ns = 0
    main, db = cpu.thread_ns(), cpu.process_ns(pid)
    runs.run_execute(run_id, llm=client)
    main_after, db_after = cpu.thread_ns(), cpu.process_ns(pid)
    if None in (main, db, main_after, db_after):
        return None
    # None of the four is None past the check above.
    on_cpu = main_after[0] - main[0] - client.cpu_ns + db_after[0] - db[0]  # type: ignore[index]
    waited = main_after[1] - main[1] - client.wait_ns + db_after[1] - db[1]  # type: ignore[index]
    return on_cpu / 1e6, waited / 1e6


def seed_threads(*, principal: Principal, threads: int) -> None:
    progress = Progress("seeding threads (10 messages each, via thread_messages_add)", threads)
    for i in range(threads):
        messages = _batch(10_000 + i, 0)[:MESSAGES_PER_THREAD]
        thread_messages_add(
            principal=principal,
            thread_id=f"thread-{i}",
            data={"messages": messages, "extract": "off"},
        )
        progress.advance()
    progress.close()


def run_extraction_bench(
    *, threads: int, runs_measured: int, out: Callable[[str], None], embedder: str = "hashing"
) -> dict:
    """Seed `threads` threads, then extract `runs_measured` of them (after a few warm-up runs on
    others) against the stand-in model; the runs' `server_ms` and its phases."""
    tenant = tenant_get_or_create(slug="bench-formation")
    tenant.extraction_daily_token_budget = 0
    tenant.save(update_fields=["extraction_daily_token_budget"])
    agent = agent_get_or_create(tenant=tenant, slug="formation")
    agent.entry_cap = 10_000_000  # eviction is not what this measures
    agent.save(update_fields=["entry_cap"])
    principal = Principal(tenant=tenant, agent=agent)
    seed_threads(principal=principal, threads=threads)
    runs_measured = max(1, min(runs_measured, threads))
    warmup = min(EXTRACTION_WARMUP, threads - runs_measured)
    with _embedder(embedder), StandInLLM() as standin:
        client = _MeteredClient(url=standin.url, model="stand-in", timeout=30, output="json_schema")
        model = get_embedder().model_name
        thread_pks = list(
            Thread.objects.for_tenant(tenant)
            .filter(agent=agent)
            .order_by("pk")
            .values_list("pk", flat=True)[: warmup + runs_measured]
        )
        run_ids, walls, cpu_ms, wait_ms = [], [], [], []
        progress = Progress("extraction runs against the stand-in model", len(thread_pks))
        with phase_timers() as phases:
            for index, pk in enumerate(thread_pks):
                if index == warmup:
                    phases.clear()
                thread = Thread.objects.get(pk=pk)
                started = time.perf_counter()
                run = runs.run_request(thread=thread, trigger="now")
                metered = _run_metered(run.pk, client)
                wall = (time.perf_counter() - started) * 1000
                if index >= warmup:
                    run_ids.append(run.pk)
                    walls.append(wall)
                    if metered is not None:
                        cpu_ms.append(metered[0])
                        wait_ms.append(metered[1])
                progress.advance()
        progress.close()
    rows = list(
        ExtractionRun.objects.filter(pk__in=run_ids).values(
            "state", "server_ms", "llm_ms", "counts", "error_class", "error_message"
        )
    )
    failed = [r for r in rows if r["state"] != RunState.DONE]
    if failed:
        first = failed[0]
        raise RuntimeError(
            f"extraction bench: {len(failed)} run(s) not done: {first['state']} "
            f"{first['error_class']} {first['error_message'][:300]}"
        )
    server = percentiles([float(r["server_ms"]) for r in rows])
    phase_stats = {name: percentiles(phases.get(name, [])) for name in PHASES}
    accounted = sum(sum(phases.get(name, [])) for name in PHASES)
    total_server = sum(r["server_ms"] for r in rows)
    phase_stats["other"] = {
        "mean": round((total_server - accounted) / len(rows), 2) if rows else None,
        "note": "claim-to-finish bookkeeping outside the timed phases (run rows, locks, parse)",
    }
    added = sum((r["counts"] or {}).get("added", 0) for r in rows)
    result = {
        "threads_in_tenant": threads,
        "messages_per_thread": MESSAGES_PER_THREAD,
        "runs": len(rows),
        "warmup_runs": warmup,
        "memories_added": added,
        "embedder": model,
        "model": "stand-in (answers at once, one add per run)",
        "server_ms": server,
        "llm_ms": percentiles([float(r["llm_ms"]) for r in rows]),
        "wall_ms": percentiles(walls),
        "phases_ms": phase_stats,
        # On-CPU time of each run_execute (ours and its PostgreSQL backend's, the model call
        # excluded), and its wait for a CPU; None where /proc does not say.
        "cpu_ms": percentiles(cpu_ms) if cpu_ms else None,
        "cpu_wait_ms": percentiles(wait_ms) if wait_ms else None,
    }
    out(
        f"extraction: {len(rows)} runs at {threads} threads, server_ms p50 {server['p50']} "
        f"p95 {server['p95']} (model excluded; stand-in llm_ms p50 {result['llm_ms']['p50']})"
    )
    return result


def formation_table(results: dict, out: Callable[[str], None]) -> None:
    out("")
    out(f"{'formation':<30}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}  target")
    ingest = results.get("ingest")
    if ingest:
        stat, limit = TARGETS["ingest"]
        verdict = "ok" if ingest[stat] <= limit else "MISSED"
        out(
            f"{'ingest 10-msg batch':<30}{ingest['n']:>6}{ingest['p50']:>9.2f}"
            f"{ingest['p95']:>9.2f}{ingest['p99']:>9.2f}  {stat} <= {limit:g} ms: {verdict}"
            f"  ({ingest['messages_per_second']:,.0f} messages/s, 1 client)"
        )
        if ingest.get("server_cpu_ms_per_batch") is not None:
            out(
                f"{'  on-CPU web+db (mean)':<30}{'':>6}{ingest['server_cpu_ms_per_batch']:>9.2f}"
                f"  (waited {ingest['server_cpu_wait_ms_per_batch']:.2f} ms for a CPU)"
            )
    extraction = results.get("extraction")
    if extraction:
        stat, limit = TARGETS["extraction_server"]
        server = extraction["server_ms"]
        verdict = "ok" if server[stat] <= limit else "MISSED"
        label = f"extraction server_ms @{extraction['threads_in_tenant']}thr"
        target = f"{stat} <= {limit:g} ms"
        if extraction["threads_in_tenant"] < 1000:
            target += " (at 1,000 threads)"
        out(
            f"{label:<30}{server['n']:>6}{server['p50']:>9.2f}{server['p95']:>9.2f}"
            f"{server['p99']:>9.2f}  {target}: {verdict}"
        )
        if extraction.get("cpu_ms"):
            on_cpu, waited = extraction["cpu_ms"], extraction["cpu_wait_ms"]
            out(
                f"{'  on-CPU run+db':<30}{on_cpu['n']:>6}{on_cpu['p50']:>9.2f}"
                f"{on_cpu['p95']:>9.2f}{on_cpu['p99']:>9.2f}  (waited p50 {waited['p50']:.2f} ms"
                " for a CPU)"
            )
        for name, stats in extraction["phases_ms"].items():
            if name == "other":
                out(f"{'  phase other (mean)':<30}{'':>6}{stats['mean'] or 0:>9.2f}")
            elif stats["n"]:
                out(
                    f"{'  phase ' + name:<30}{stats['n']:>6}{stats['p50']:>9.2f}"
                    f"{stats['p95']:>9.2f}{stats['p99']:>9.2f}"
                )
    out("")

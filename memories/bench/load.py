"""The mixed load (`bench --load`, SPEC §10 throughput): 8 client processes, 30% store, 40%
hybrid search, 30% recall by key, against `python manage.py serve` with its defaults.

The bench process seeds a throwaway database (one agent per client, `SEED_PER_AGENT` memories
each, embedded by the embedder under test so that search sees real vectors), starts `serve` on
it (web workers, thread pool and the django-q2 cluster as `serve` chooses them), then starts the
clients (memories/bench/load_client.py). Each is a closed loop: it sends its next request when
the last has answered. After a warm-up, every request of `duration` seconds is timed; the figures
are the requests answered per second and the latency percentiles of each operation.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from memories.bench import cpu, latency
from memories.bench.server import Progress, free_port, server_env
from memories.embeddings import build_embedder

MIX = {"store": 30, "search_hybrid": 40, "recall": 30}
SEED_PER_AGENT = 500
POOL = 4000  # store texts and queries generated for each client (cycled through)
WARMUP = 3.0  # seconds of unmeasured requests before the timed window


def load_query(rng: random.Random) -> str:
    """A search as an agent would phrase it (35,000 combinations: few repeat in a run)."""
    return (
        f"{latency.query_text(rng)} in {rng.choice(latency.PLACES)} on {rng.choice(latency.DAYS)}"
    )


def seed(*, clients: int, embedder_name: str, per_agent: int, out) -> list[dict]:
    """One agent, key and seeded memories per client; returns each client's credentials."""
    tenant = tenant_get_or_create(slug="load")
    embedder = build_embedder(embedder_name)
    progress = Progress(f"seeding {clients} agents ({embedder.model_name})", clients * per_agent)
    creds = []
    for index in range(clients):
        agent = agent_get_or_create(tenant=tenant, slug=f"load-{index}")
        agent.entry_cap = 10_000_000  # eviction is not what this measures
        agent.save(update_fields=["entry_cap"])
        latency.seed_agent(
            tenant_id=tenant.pk,
            agent_id=agent.pk,
            agent_index=index,
            count=per_agent,
            progress=progress,
            embedder=embedder,
        )
        _, key = api_key_create(tenant=tenant, agent=agent, scopes=["read", "write"])
        creds.append({"key": key, "keys": latency.recallable_keys(index, per_agent)})
    progress.close()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE memories_memory")
    out(f"seeded {clients * per_agent} memories with {embedder.model_name}")
    return creds


@contextmanager
def serving(data_dir: Path, *, embedder: str, out, timeout: float = 180):
    """`python manage.py serve` (its defaults) on `data_dir` and a free port; yields its URL."""
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = server_env(data_dir, embedder)
    log_path = data_dir / "serve.log"  # removed with the throwaway directory
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=settings.BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(base_url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text()[-3000:]
                raise RuntimeError(f"`serve` did not come up:\n{tail}")
            time.sleep(0.2)
        out(f"serve up at {base_url}")
        yield base_url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _postgres(data_dir: Path) -> list[int]:
    """The embedded PostgreSQL's postmaster and its backends."""
    try:
        postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    return cpu.descendants(postmaster)


def _healthy(base_url: str) -> bool:
    try:
        return httpx.get(base_url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _warm(base_url: str, creds: list[dict], queries: list[str]) -> None:
    """Searches on parallel connections, so that every web worker loads its model before the
    clock starts."""
    headers = {"Authorization": f"Bearer {creds[0]['key']}"}

    def search(query: str) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
            client.post("/api/v1/search", json={"query": query, "mode": "hybrid"})

    with ThreadPoolExecutor(max_workers=len(queries)) as pool:
        list(pool.map(search, queries))


def drive(
    base_url: str, creds: list[dict], *, duration: float, warmup: float, out: Callable
) -> tuple[list[dict], float]:
    """Run one client process per credential; returns their results and the wall seconds."""
    configs = []
    for index, cred in enumerate(creds):
        rng = random.Random(1000 + index)
        configs.append(
            {
                "base_url": base_url,
                "key": cred["key"],
                "keys": cred["keys"],
                "seed": index,
                "mix": MIX,
                "warmup": warmup,
                "duration": duration,
                "facts": [latency.fact(rng, i) for i in range(POOL)],
                "queries": [load_query(rng) for _ in range(POOL)],
            }
        )
    _warm(base_url, creds, configs[0]["queries"][-8:])
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "memories.bench.load_client"],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in configs
    ]
    try:
        for process, config in zip(processes, configs, strict=True):
            process.stdin.write(json.dumps(config) + "\n")
            process.stdin.flush()
        for process in processes:
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError("a load client did not start")
        started = time.monotonic()
        for process in processes:
            process.stdin.write("go\n")
            process.stdin.flush()
        out(f"{len(processes)} clients: {warmup:g}s warm-up, {duration:g}s measured")
        results = []
        for process in processes:
            line = process.stdout.readline()
            if process.wait(timeout=duration + warmup + 120) != 0 or not line:
                raise RuntimeError("a load client failed")
            results.append(json.loads(line))
        return results, time.monotonic() - started - warmup
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def summarise(results: list[dict], duration: float) -> dict:
    """Requests per second, latency percentiles and errors of each operation, and overall."""
    ops: dict = {}
    everything: list[float] = []
    total_errors: dict[str, int] = {}
    for name in MIX:
        samples = [ms for r in results for ms in r["latencies"][name]]
        errors: dict[str, int] = {}
        for r in results:
            for problem, n in r["errors"][name].items():
                errors[problem] = errors.get(problem, 0) + n
                total_errors[problem] = total_errors.get(problem, 0) + n
        ops[name] = {
            **latency.percentiles(samples),
            "req_per_s": round(len(samples) / duration, 1),
            "errors": sum(errors.values()),
            "error_kinds": errors,
        }
        everything.extend(samples)
    ops["all"] = {
        **latency.percentiles(everything),
        "req_per_s": round(len(everything) / duration, 1),
        "errors": sum(total_errors.values()),
        "error_kinds": total_errors,
    }
    return ops


def run_load_bench(
    *, data_dir: Path, clients: int, duration: float, embedder: str, out, warmup=WARMUP
) -> dict:
    creds = seed(clients=clients, embedder_name=embedder, per_agent=SEED_PER_AGENT, out=out)
    with serving(data_dir, embedder=embedder, out=out) as (base_url, serve_pid):
        trees = {"web": lambda: cpu.descendants(serve_pid), "db": lambda: _postgres(data_dir)}
        before = {name: cpu.processes_ns(pids()) for name, pids in trees.items()}
        results, wall = drive(base_url, creds, duration=duration, warmup=warmup, out=out)
        after = {name: cpu.processes_ns(pids()) for name, pids in trees.items()}
    ops = summarise(results, duration)
    answered = sum(len(r["latencies"][name]) for r in results for name in MIX)
    # On-CPU time per request of the server side (web processes, PostgreSQL), warm-up included
    # (its requests are not counted): what the code costs, whatever else the machine runs.
    rate = answered / duration * (wall + warmup) if duration else 0
    server_cpu = {
        name: round(cpu.delta_ms(before[name], after[name])[0] / rate, 2) if rate else None
        for name in trees
    }
    return {
        "clients": clients,
        "duration_s": duration,
        "warmup_s": warmup,
        "embedder": embedder,
        "mix_percent": MIX,
        "seeded_memories": clients * SEED_PER_AGENT,
        "machine_load_avg": [round(x, 2) for x in os.getloadavg()],
        "operations": ops,
        "server_cpu_ms_per_request": server_cpu,
    }


def load_table(result: dict, out) -> None:
    out("")
    out(
        f"mixed load: {result['clients']} clients, {result['duration_s']:g}s, embedder "
        f"{result['embedder']} (load average after: {result['machine_load_avg'][0]})"
    )
    out(
        f"{'operation':<15}{'n':>7}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}"
    )
    for name, row in result["operations"].items():
        out(
            f"{name:<15}{row['n']:>7}{row['req_per_s']:>9.1f}{row['p50']:>9.2f}"
            f"{row['p95']:>9.2f}{row['p99']:>9.2f}{row['errors']:>8}"
        )
    server_cpu = result["server_cpu_ms_per_request"]
    if all(v is not None for v in server_cpu.values()):
        out(
            f"server on-CPU per request: web {server_cpu['web']:.2f} ms, "
            f"PostgreSQL {server_cpu['db']:.2f} ms"
        )
    out("")

"""The mixed load (`bench --load`, the throughput bar): 8 client processes, 30% store, 40%
hybrid search, 30% recall by key, against `python manage.py serve` with its defaults.

The bench process seeds a throwaway database (one agent per client, `SEED_PER_AGENT` memories
each, texts of the `--corpus` (bench/corpus.py), embedded by the embedder under test
so that search sees real vectors), starts `serve` on it (web workers, thread pool and the
django-q2 cluster as `serve` chooses them, or `--workers`), then starts the clients
(bench/load_client.py). Each is a closed loop: it sends its next request when the last
has answered. After a warm-up, every request of `duration` seconds is timed; the figures are the
requests answered per second and the latency percentiles of each operation.

Beside them, the CPU each kind of process spent per request of the timed window
(`/proc/PID/stat`, so a thread or process that ended meanwhile still counts): the web workers,
PostgreSQL's backends, its background processes, its processes that ended (closed connections,
autovacuum workers), the django-q2 cluster, `serve` itself and the load clients; and how many
PostgreSQL backends were opened and closed meanwhile (connection churn).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path

import httpx
from django.conf import settings
from django.db import connection

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import cpu, latency, statements
from bench import pgbouncer as pooler
from bench.corpus import CORPORA, Corpus
from bench.server import Progress
from memories.embeddings import build_embedder
from memoryhub.supervisor import default_workers
from memoryhub.throwaway import free_port, server_env

MIX = {"store": 30, "search_hybrid": 40, "recall": 30}
SEED_PER_AGENT = 500
POOL = 4000  # store texts and queries generated for each client (cycled through)
WARMUP = 3.0  # seconds of unmeasured requests before the timed window


# PostgreSQL settings recorded with the figures: those that change a request's CPU.
POSTGRES_SETTINGS = ("max_connections", "shared_buffers", "jit", "huge_pages", "work_mem")


def seed(
    *, agents: int, embedder_name: str, per_agent: int, out, corpus: Corpus = CORPORA["synthetic"]
) -> list[dict]:
    """`agents` agents, each with a key and `per_agent` seeded memories; returns each agent's
    credentials (`spread` hands them to the clients)."""
    tenant = tenant_get_or_create(slug="load")
    embedder = build_embedder(embedder_name)
    progress = Progress(f"seeding {agents} agents ({embedder.model_name})", agents * per_agent)
    creds = []
    for index in range(agents):
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
            text=corpus.fact,
        )
        _, key = api_key_create(tenant=tenant, agent=agent, scopes=["read", "write"])
        creds.append({"key": key, "keys": latency.recallable_keys(index, per_agent)})
    progress.close()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE memories_memory")
    out(f"seeded {agents * per_agent} memories with {embedder.model_name}")
    return creds


def spread(creds: list[dict], clients: int) -> list[dict]:
    """Each client's credentials: client i works as agent i mod the agents seeded."""
    return [creds[index % len(creds)] for index in range(clients)]


@contextmanager
def serving(
    data_dir: Path,
    *,
    embedder: str,
    out,
    workers: int | None = None,
    timeout: float | None = None,
    env: dict[str, str | None] | None = None,
    name: str = "serve",
):
    """`python manage.py serve` (its defaults, or `workers` web processes) on `data_dir` and a
    free port; yields its URL and pid. Each web process imports the app and loads its model at
    start-up: on a busy machine that takes a while, hence the time allowed per process. `env`:
    variables set (a value) or removed (None) for this server; `name` names its log file."""
    timeout = timeout or max(180.0, 60.0 * (workers or default_workers()))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server_environment = server_env(data_dir, embedder)
    for variable, value in (env or {}).items():
        if value is None:
            server_environment.pop(variable, None)
        else:
            server_environment[variable] = value
    env = server_environment  # type: ignore[assignment]
    log_path = data_dir / f"{name}.log"  # removed with the throwaway directory
    command = [sys.executable, "manage.py", "serve", "--port", str(port)]
    if workers is not None:
        command += ["--workers", str(workers)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            command,
            cwd=settings.BASE_DIR,
            env=env,  # type: ignore[arg-type]  # str values only, from here on
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
        out(f"{name} up at {base_url}")
        yield base_url, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _postmaster(data_dir: Path) -> list[int]:
    """The embedded PostgreSQL's postmaster (none when it cannot be read)."""
    try:
        return [int((data_dir / "pg" / "postmaster.pid").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


# PostgreSQL's own processes (`postgres: <name>` in their command line), not a client's backend.
POSTGRES_BACKGROUND = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum",
    "logical replication",
    "io worker",
    "archiver",
    "walsummarizer",
    "parallel worker",
)
KINDS = (
    "web",
    "postgres backends",
    "postgres background",
    "postgres ended",
    "cluster",
    "serve",
)


def _kind(root: str, pid: int, sample: cpu.ProcessCPU, root_pid: int) -> str | None:
    """The kind of a process below `serve` or the postmaster (`KINDS`)."""
    if root == "pgbouncer":
        return "pgbouncer"
    if root == "postgres":
        activity = sample.cmdline.removeprefix("postgres: ")
        if pid == root_pid or activity.startswith(POSTGRES_BACKGROUND):
            return "postgres background"
        return "postgres backends"
    if pid == root_pid:
        return "serve"
    # The cluster's workers are forks of `manage.py qcluster`, with its command line.
    return "cluster" if "qcluster" in sample.cmdline else "web"


def _ended_kind(parent_kind: str) -> str:
    # What the postmaster reaped: backends whose connection closed, autovacuum workers.
    return "postgres ended" if parent_kind == "postgres background" else parent_kind


def _clients_ms() -> float:
    """CPU ms of this process's children that ended and were waited for (the load clients)."""
    times = os.times()
    return (times.children_user + times.children_system) * 1000


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
    base_url: str | tuple[str, ...] | list[str],
    creds: list[dict],
    *,
    duration: float,
    warmup: float,
    out: Callable,
    corpus: Corpus = CORPORA["synthetic"],
    started: Callable[[list[int]], None] = lambda pids: None,
) -> tuple[list[dict], float]:
    """Run one client process per credential; returns their results and the wall seconds.
    `base_url`: the server; or the nodes (a tuple), each client sending its requests to each in
    turn (load_client.node_of); or each client's server (a list as long as `creds`).
    `started(the clients' pids)` is called once every client has been told to go."""
    if isinstance(base_url, str):
        base_url = (base_url,)
    urls = [base_url] * len(creds) if isinstance(base_url, tuple) else [(u,) for u in base_url]
    configs = []
    for index, (cred, url) in enumerate(zip(creds, urls, strict=True)):
        rng = random.Random(1000 + index)
        configs.append(
            {
                "base_urls": list(url),
                "key": cred["key"],
                "keys": cred["keys"],
                "seed": index,
                "mix": MIX,
                "warmup": warmup,
                "duration": duration,
                "facts": [corpus.fact(rng, i) for i in range(POOL)],
                "queries": [corpus.query(rng) for _ in range(POOL)],
            }
        )
    for node in dict.fromkeys(u for each in urls for u in each):
        _warm(node, creds, configs[0]["queries"][-8:])
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.load_client"],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in configs
    ]
    try:
        for process, config in zip(processes, configs, strict=True):
            process.stdin.write(json.dumps(config) + "\n")  # type: ignore[union-attr]  # PIPE
            process.stdin.flush()  # type: ignore[union-attr]  # PIPE
        for process in processes:
            if process.stdout.readline().strip() != "ready":  # type: ignore[union-attr]  # PIPE
                raise RuntimeError("a load client did not start")
        went = time.monotonic()
        for process in processes:
            process.stdin.write("go\n")  # type: ignore[union-attr]  # PIPE
            process.stdin.flush()  # type: ignore[union-attr]  # PIPE
        started([process.pid for process in processes])
        out(f"{len(processes)} clients: {warmup:g}s warm-up, {duration:g}s measured")
        results = []
        for process in processes:
            line = process.stdout.readline()  # type: ignore[union-attr]  # PIPE
            if process.wait(timeout=duration + warmup + 120) != 0 or not line:
                raise RuntimeError("a load client failed")
            results.append(json.loads(line))
        return results, time.monotonic() - went - warmup
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
    *,
    data_dir: Path,
    clients: int,
    duration: float,
    embedder: str,
    out,
    warmup=WARMUP,
    corpus: str = "synthetic",
    workers: int | None = None,
    statement_stats: bool = False,
    agents: int | None = None,
    nodes: int = 1,
    pgbouncer: bool = False,
    transaction_mode: bool = False,
) -> dict:
    """`statement_stats`: also where PostgreSQL's time went, statement by statement
    (`bench.statements`; the database must load pg_stat_statements).
    `agents`: how many agents are seeded (default one per client); client i works as agent
    i mod `agents`. A fixed number keeps the database the same size whatever the clients, so
    that runs with different `--workers` (and clients) compare the code, not the data.
    `nodes`: that many `serve`s (each with its cluster) on the one database, each client
    sending its requests to each node in turn; `workers` is then each node's (default:
    `serve`'s own count shared between them, `node_workers`). `pgbouncer`: the nodes reach the
    database through PgBouncer in transaction mode (bench/pgbouncer.py). `transaction_mode`:
    the nodes run with `MEMORYHUB_DB_POOL_MODE=transaction` but reach the database directly,
    which tells what the mode costs from what the pooler does."""
    chosen = CORPORA[corpus]
    agents = agents or clients
    if nodes > 1:
        workers = node_workers(workers, nodes)
    seeded = seed(
        agents=agents, embedder_name=embedder, per_agent=SEED_PER_AGENT, out=out, corpus=chosen
    )
    creds = spread(seeded, clients)
    with ExitStack() as stack:
        roots = {"postgres": _postmaster(data_dir)}
        env: dict[str, str | None] = {}
        if transaction_mode:
            env["MEMORYHUB_DB_POOL_MODE"] = "transaction"
        if pgbouncer:
            pooled_url, pooler_pid = stack.enter_context(
                pooler.running(settings.DATABASES["default"], out=out)
            )
            roots["pgbouncer"] = [pooler_pid]
            env = pooled_env(pooled_url, settings.DATABASES["default"])
        urls = []
        for node in range(nodes):
            name = "serve" if nodes == 1 else f"serve-{node + 1}"
            url, serve_pid = stack.enter_context(
                serving(data_dir, embedder=embedder, out=out, workers=workers, env=env, name=name)
            )
            urls.append(url)
            roots.setdefault("serve", []).append(serve_pid)
        samples: dict = {}

        def started(client_pids: list[int]) -> None:
            # Sampled once the warm-up is over: the steady state's CPU, not each process's and
            # connection's first requests (compiling statements, filling caches).
            time.sleep(warmup)
            samples["before"] = cpu.sample_kinds(roots, _kind)
            pre = (cpu.process_cpu(pid) for pid in client_pids)
            samples["clients"] = _clients_ms() + sum(c.own for c in pre if c is not None)
            if statement_stats:
                statements.reset()

        results, _wall = drive(
            urls[0] if nodes == 1 else tuple(urls),
            creds,
            duration=duration,
            warmup=warmup,
            out=out,
            corpus=chosen,
            started=started,
        )
        after = cpu.sample_kinds(roots, _kind)
        clients_ms = _clients_ms() - samples["clients"]
        count = answered(results)
        by_statement = statements.read(count) if statement_stats else None
        settings_now = _postgres_settings()
    before = samples["before"]
    spent = cpu.kinds_delta_ms(before, after, _ended_kind)
    ops = summarise(results, duration)
    # The requests of the timed window (`count`) against the CPU spent from its start to the
    # last answer: what the code costs, whatever else the machine runs.

    def per_request(ms: float) -> float | None:
        return ms_per(ms, count)

    kinds = KINDS + (("pgbouncer",) if pgbouncer else ())
    by_kind = {kind: per_request(spent.get(kind, 0.0)) for kind in kinds}
    by_kind["clients"] = per_request(clients_ms)
    backends = {"before": _pids_of(before, "postgres backends")}
    backends["after"] = _pids_of(after, "postgres backends")
    return {
        "clients": clients,
        "duration_s": duration,
        "warmup_s": warmup,
        "embedder": embedder,
        "corpus": corpus,
        "workers": workers or default_workers(),
        "nodes": nodes,
        "pool_mode": "transaction" if pgbouncer or transaction_mode else "session",
        "pooler": f"pgbouncer (transaction mode, {pooler.POOL_SIZE} server connections)"
        if pgbouncer
        else None,
        "mix_percent": MIX,
        "agents": agents,
        "seeded_memories": agents * SEED_PER_AGENT,
        "machine_load_avg": [round(x, 2) for x in os.getloadavg()],
        "operations": ops,
        "warmup_requests": sum(r.get("warmup_requests", 0) for r in results),
        "requests_by_node": [sum(r["by_node"][i] for r in results) for i in range(nodes)],
        "cpu_ms_per_request": by_kind,
        # The server's part as before (web processes; PostgreSQL, all of it).
        "server_cpu_ms_per_request": {
            "web": by_kind["web"],
            "db": per_request(sum(spent.get(k, 0.0) for k in KINDS if k.startswith("postgres"))),
            **({"pooler": by_kind["pgbouncer"]} if pgbouncer else {}),
        },
        "postgres_backends": {
            "at_end": len(backends["after"]),
            "opened": len(backends["after"] - backends["before"]),
            "closed": len(backends["before"] - backends["after"]),
        },
        "postgres_settings": settings_now,
        **({"statements": by_statement} if by_statement else {}),
    }


def node_workers(workers: int | None, nodes: int) -> int:
    """Web processes of each of `nodes` servers on one machine: `workers` when given, else
    what `serve` would run alone shared between them (at least one each), so that together
    they run as many as one server would."""
    return workers or max(1, default_workers() // nodes)


def pooled_env(url: str, direct: Mapping) -> dict[str, str | None]:
    """A node's environment behind a transaction-mode pooler at `url`: the mode set, and a
    direct connection (`direct`: Django's settings of the server itself) for LISTEN alone."""
    return {
        "DATABASE_URL": url,
        "MEMORYHUB_DB_POOL_MODE": "transaction",
        "MEMORYHUB_DIRECT_DATABASE_URL": (
            f"host={direct['HOST']} port={direct['PORT']} user={direct['USER']} "
            f"dbname={direct['NAME']}"
        ),
    }


def answered(results: list[dict]) -> int:
    """Requests the clients sent in the timed window, answered well or not."""
    return sum(len(r["latencies"][n]) + sum(r["errors"][n].values()) for r in results for n in MIX)


def ms_per(ms: float, requests: int) -> float | None:
    """CPU ms per request, None without requests."""
    return round(ms / requests, 2) if requests else None


def _pids_of(sample: dict, kind: str) -> set[int]:
    return {pid for pid, (k, _) in sample.items() if k == kind}


def _postgres_settings() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, setting || COALESCE(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            [list(POSTGRES_SETTINGS)],
        )
        return dict(cursor.fetchall())


def load_table(result: dict, out) -> None:
    out("")
    workers = result.get("workers")
    nodes = result.get("nodes", 1)
    where = f"{workers} web workers" if nodes == 1 else f"{nodes} nodes of {workers} web workers"
    if result.get("pooler"):
        where += f", through {result['pooler']}"
    elif result.get("pool_mode") == "transaction":
        where += ", MEMORYHUB_DB_POOL_MODE=transaction without a pooler"
    out(
        f"mixed load: {result['clients']} clients on {result['agents']} "
        f"agents, {result['duration_s']:g}s, embedder "
        f"{result['embedder']}, corpus {result.get('corpus', 'synthetic')}, {where} "
        f"(load average after: {result['machine_load_avg'][0]})"
    )
    out(
        f"{'operation':<15}{'n':>7}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}"
    )
    for name, row in result["operations"].items():
        out(
            f"{name:<15}{row['n']:>7}{row['req_per_s']:>9.1f}{row['p50']:>9.2f}"
            f"{row['p95']:>9.2f}{row['p99']:>9.2f}{row['errors']:>8}"
        )
    if nodes > 1:
        out("timed requests by node: " + ", ".join(str(n) for n in result["requests_by_node"]))
    by_kind = result["cpu_ms_per_request"]
    if all(v is not None for v in by_kind.values()):
        out(
            "CPU ms per request: "
            + ", ".join(f"{kind} {ms:.2f}" for kind, ms in by_kind.items())
            + f" (server {sum(v for k, v in by_kind.items() if k != 'clients'):.2f})"
        )
    backends = result["postgres_backends"]
    out(
        f"PostgreSQL backends: {backends['at_end']} at the end, {backends['opened']} opened and "
        f"{backends['closed']} closed during the run; "
        + ", ".join(f"{k} {v}" for k, v in result["postgres_settings"].items())
    )
    if result.get("statements"):
        statements.statements_table(result["statements"], out)
    out("")

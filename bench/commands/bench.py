"""`python -m bench` (or `python manage.py bench`): latency over real HTTP, pruning, memory
formation (ingest and extraction server time) and LoCoMo retrieval quality
(docs/benchmarks.md).

Runs on a throwaway embedded PostgreSQL in a temp dir with a real uvicorn server on a free
127.0.0.1 port; prints tables and writes bench-results.json. `--charts` draws a results file's
figures as SVG (docs/benchmarks.md's charts) and runs nothing.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import latency
from bench.backup import backup_table, run_backup_bench
from bench.charts import write_charts
from bench.corpus import CORPORA
from bench.formation import formation_table, run_extraction_bench, run_ingest_bench
from bench.load import load_table, run_load_bench
from bench.locomo import KS, MODES, run_locomo
from bench.pair import PAIRS, pair_table, run_pair_bench
from bench.pgbouncer import MISSING as PGBOUNCER_MISSING
from bench.pgbouncer import find_pgbouncer
from bench.prune import run_prune_bench
from bench.versus import add_mixed_arguments, mixed_options, run_versus_bench, versus_table
from memories.models import Memory
from memoryhub.throwaway import ApiServer, durability, throwaway_database

SCALES = (10_000, 100_000, 1_000_000)
DEFAULT_LOCOMO = settings.BASE_DIR.parent / "shared" / "datasets" / "locomo10.json"


def read_results(path: Path) -> dict:
    """The figures a results file holds (none when it is missing or not a JSON object): a
    section's run is merged into them."""
    try:
        results = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return results if isinstance(results, dict) else {}


def write_results(path: Path, results: dict) -> None:
    """The results file, whole (`read_results`'s figures with a section's run merged in)."""
    path.write_text(json.dumps(results, indent=2) + "\n")


def stamp(result: dict) -> None:
    """When a section's run ended and on what machine."""
    result["started_at"] = timezone.now().isoformat()
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}


class Command(BaseCommand):
    help = "Benchmark latency (store, recall, list, search, hydrate) and LoCoMo recall."

    def add_arguments(self, parser):
        parser.add_argument(
            "--quick",
            action="store_true",
            help="10k memories only, fewer requests, a LoCoMo subset (under two minutes)",
        )
        parser.add_argument(
            "--scale",
            type=int,
            default=100_000,
            help="largest tenant size; measured at 10k, 100k (1M with --scale 1000000)",
        )
        parser.add_argument(
            "--embedder", default="auto", help="embedder for LoCoMo: auto, local, hashing, openai"
        )
        parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO)
        parser.add_argument("--output", type=Path, default=Path("bench-results.json"))
        parser.add_argument("--requests", type=int, help="timed requests per operation")
        parser.add_argument("--conversations", type=int, help="LoCoMo conversations to load")
        parser.add_argument("--questions", type=int, help="LoCoMo questions per conversation")
        parser.add_argument(
            "--prune-scale", type=int, help="expired memories for the prune bench (0: skip)"
        )
        parser.add_argument(
            "--ingest-batches",
            type=int,
            help="10-message batches timed through POST /api/v1/threads/{id}/messages",
        )
        parser.add_argument(
            "--threads",
            type=int,
            help="threads in the tenant for the extraction bench (default 1000; --quick 100)",
        )
        parser.add_argument(
            "--extraction-runs",
            type=int,
            help="extraction runs timed against the stand-in model (default 200; --quick 50)",
        )
        parser.add_argument(
            "--formation-embedder",
            default="hashing",
            help="embedder of the extraction runs (hashing, as the latency targets; or local)",
        )
        parser.add_argument(
            "--load",
            action="store_true",
            help="only the mixed load (30%% store, 40%% hybrid search, 30%% recall) against "
            "`serve` with its defaults; its figures are merged into --output",
        )
        parser.add_argument(
            "--charts",
            action="store_true",
            help="only draw the figures of --output (a bench-results.json) as SVG charts into "
            "--charts-dir: latency by scale, throughput by embedder, recall by mode",
        )
        parser.add_argument("--charts-dir", type=Path, default=Path("docs"))
        parser.add_argument(
            "--clients",
            type=int,
            default=8,
            help="--load client processes; --versus-mem0: the mixed load's clients",
        )
        parser.add_argument("--duration", type=float, default=30.0, help="--load seconds timed")
        parser.add_argument(
            "--corpus",
            choices=sorted(CORPORA),
            default="synthetic",
            help="--load texts and queries: synthetic (the latency bench's facts) or "
            "small-vocabulary (short texts over 300 words, questions matching much of them)",
        )
        parser.add_argument(
            "--workers", type=int, help="--load: web processes for `serve` (default: its own)"
        )
        parser.add_argument(
            "--agents",
            type=int,
            help="--load: agents seeded (500 memories each; default one per client), the "
            "clients spread over them; fix it to compare runs with different --workers/--clients",
        )
        parser.add_argument(
            "--pair",
            choices=sorted(PAIRS),
            help="--load: two servers on one database at once, the clients split between them; "
            "metrics, access log and events off on one, and on the other the named ones "
            "(observability: all three; same: none, the pair's own noise) (bench/pair.py)",
        )
        parser.add_argument(
            "--nodes",
            type=int,
            default=1,
            help="--load: that many `serve` nodes (each with its cluster) on the one database, "
            "each client sending its requests to each node in turn (no proxy); --workers is "
            "then each node's, by default `serve`'s own count shared between them",
        )
        parser.add_argument(
            "--pgbouncer",
            action="store_true",
            help="--load: the nodes reach the database through PgBouncer in transaction mode, "
            "started by the bench (Debian's `pgbouncer`), with MEMORYHUB_DB_POOL_MODE=transaction",
        )
        parser.add_argument(
            "--transaction-mode",
            action="store_true",
            help="--load: the nodes run with MEMORYHUB_DB_POOL_MODE=transaction but reach the "
            "database directly (what the mode costs, apart from the pooler's own)",
        )
        parser.add_argument(
            "--statements",
            action="store_true",
            help="--load: also PostgreSQL's time per request statement by statement "
            "(pg_stat_statements over the timed window; bench/statements.py)",
        )
        parser.add_argument(
            "--versus-mem0",
            metavar="URL",
            help="only the side-by-side with mem0's REST server at URL (started beforehand: "
            "bench/mem0-side-by-side.sh): all LoCoMo turns bulk-loaded, then --requests "
            "(default 300) writes, hybrid and semantic searches, the two systems interleaved; "
            'its figures go under "versus_mem0" in --output (bench/versus.py)',
        )
        parser.add_argument(
            "--mem0-key", help="--versus-mem0: mem0's API key (its X-API-Key / ADMIN_API_KEY)"
        )
        add_mixed_arguments(parser)
        parser.add_argument(
            "--backup",
            action="store_true",
            help="only `manage.py backup` against plain `pg_dump -Fc` on --scale memories "
            '(3 runs each, medians); its figures go under "backup" in --output (bench/backup.py)',
        )
        parser.add_argument("--skip-latency", action="store_true")
        parser.add_argument("--skip-formation", action="store_true")
        parser.add_argument("--skip-locomo", action="store_true")

    def handle(self, *args, **opts):
        if opts["charts"]:
            self.charts(opts["output"], opts["charts_dir"])
            return
        if opts["load"]:
            self.load(opts)
            return
        if opts["versus_mem0"]:
            self.versus_mem0(opts)
            return
        if opts["backup"]:
            self.backup(opts)
            return
        quick = opts["quick"]
        scale = 10_000 if quick else opts["scale"]
        if scale < 1:
            raise CommandError("--scale must be positive")
        scales = [s for s in SCALES if s <= scale] or [scale]
        if scale not in scales:
            scales.append(scale)
        requests = opts["requests"] or (100 if quick else 300)
        conversations = opts["conversations"] or (1 if quick else None)
        questions = opts["questions"]
        prune_scale = opts["prune_scale"]
        if prune_scale is None:
            prune_scale = 10_000 if quick else 1_000_000
        ingest_batches = opts["ingest_batches"] or (50 if quick else requests)
        threads = opts["threads"] or (100 if quick else 1000)
        extraction_runs = opts["extraction_runs"] or (50 if quick else 200)
        if threads < 1 or ingest_batches < 1 or extraction_runs < 1:
            raise CommandError("--threads, --ingest-batches and --extraction-runs must be positive")
        locomo_path = opts["locomo"]
        if not opts["skip_locomo"] and not locomo_path.exists():
            raise CommandError(f"LoCoMo dataset not found at {locomo_path} (use --locomo PATH)")

        logging.getLogger("httpx").setLevel(logging.WARNING)
        logging.getLogger("django-q").setLevel(logging.WARNING)  # one line per enqueued run
        started = time.monotonic()
        results: dict = {
            "meta": {
                "started_at": timezone.now().isoformat(),
                "quick": quick,
                "scales": scales,
                "requests_per_operation": requests,
                "embedder_latency": "hashing",
                "embedder_locomo": opts["embedder"],
                "embedder_formation": opts["formation_embedder"],
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
            }
        }
        if quick:
            self.out(
                "--quick: 10k memories only, "
                f"{requests} requests per operation, a {prune_scale} prune, {ingest_batches} "
                f"ingest batches, extraction at {threads} threads (not 1,000), LoCoMo subset of "
                f"{conversations} conversation(s)"
            )
        ingest = None
        with throwaway_database(self.out, durable=True) as data_dir:
            results["meta"]["postgres"] = durability()
            if not opts["skip_latency"]:
                # The ingest figure is taken on the latency bench's server (one start fewer).
                results["latency"], ingest = self.latency(
                    data_dir,
                    scales,
                    requests,
                    ingest_batches=None if opts["skip_formation"] else ingest_batches,
                )
            if prune_scale:
                # --quick times 100 stores each side (the same count as its other operations).
                results["prune"] = self.prune(prune_scale, samples=requests)
            if not opts["skip_formation"]:
                results["formation"] = self.formation(
                    data_dir,
                    ingest,
                    ingest_batches,
                    threads,
                    extraction_runs,
                    opts["formation_embedder"],
                )
            if not opts["skip_locomo"]:
                results["locomo"] = self.locomo(
                    data_dir, locomo_path, opts["embedder"], conversations, questions
                )
        results["meta"]["seconds"] = round(time.monotonic() - started, 1)
        write_results(opts["output"], results)
        self.out(f"wrote {opts['output']} ({results['meta']['seconds']}s)")

    def out(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

    # --- charts (bench/charts.py) ------------------------------------------------

    def charts(self, results_path: Path, directory: Path) -> None:
        try:
            results = json.loads(results_path.read_text())
        except (OSError, ValueError) as exc:
            raise CommandError(f"cannot read {results_path}: {exc}") from exc
        written = write_charts(results, directory)
        if not written:
            raise CommandError(f"{results_path} holds no latency, load or LoCoMo figures")
        for path in written:
            self.out(f"wrote {path}")

    # --- mixed load (bench/load.py) ------------------------------------------------

    def backup(self, opts: dict) -> None:
        """The backup's cost alone; its figures go under "backup" in --output."""
        with throwaway_database(self.out, durable=True):
            result = run_backup_bench(scale=opts["scale"], out=self.out)
        stamp(result)
        results = read_results(opts["output"])
        results["backup"] = result
        write_results(opts["output"], results)
        self.out(backup_table(result))

    def load(self, opts: dict) -> None:
        """The mixed load alone; its figures go under "load" → embedder (then "/" corpus and
        "/N workers" when not the defaults) in --output, next to whatever figures the file
        already holds."""
        if opts["clients"] < 1 or opts["duration"] <= 0:
            raise CommandError("--clients and --duration must be positive")
        if opts["workers"] is not None and opts["workers"] < 1:
            raise CommandError("--workers must be positive")
        if opts["pair"] and (opts["clients"] < 2 or opts["clients"] % 2):
            raise CommandError("--pair splits the clients in two: give an even --clients")
        if opts["statements"] and opts["pair"]:
            raise CommandError("--statements reads one server's database: not with --pair")
        if opts["agents"] is not None and opts["agents"] < 1:
            raise CommandError("--agents must be positive")
        if opts["agents"] is not None and opts["pair"]:
            raise CommandError("--agents: not with --pair (each client is its own agent there)")
        if opts["nodes"] < 1:
            raise CommandError("--nodes must be positive")
        if opts["pair"] and (opts["nodes"] > 1 or opts["pgbouncer"] or opts["transaction_mode"]):
            raise CommandError(
                "--nodes, --pgbouncer and --transaction-mode: not with --pair (it runs its own two)"
            )
        if opts["pgbouncer"] and opts["transaction_mode"]:
            raise CommandError("--transaction-mode is without a pooler; --pgbouncer implies it")
        if opts["pgbouncer"] and find_pgbouncer() is None:
            raise CommandError(PGBOUNCER_MISSING)
        embedder = opts["embedder"]
        logging.getLogger("httpx").setLevel(logging.WARNING)
        run, table = (run_pair_bench, pair_table) if opts["pair"] else (run_load_bench, load_table)
        extra = {"pair": opts["pair"]} if opts["pair"] else {}
        if opts["statements"]:
            extra["statement_stats"] = True
        if opts["agents"] is not None:
            extra["agents"] = opts["agents"]
        if opts["nodes"] > 1:
            extra["nodes"] = opts["nodes"]
        if opts["pgbouncer"]:
            extra["pgbouncer"] = True
        if opts["transaction_mode"]:
            extra["transaction_mode"] = True
        with throwaway_database(
            self.out, durable=True, statement_stats=opts["statements"]
        ) as data_dir:
            result = run(
                data_dir=data_dir,
                clients=opts["clients"],
                duration=opts["duration"],
                embedder=embedder,
                out=self.out,
                corpus=opts["corpus"],
                workers=opts["workers"],
                **extra,
            )
            result["postgres"] = durability()
        stamp(result)
        table(result, self.out)
        path = opts["output"]
        results = read_results(path)
        name = embedder
        if opts["corpus"] != "synthetic":
            name += f"/{opts['corpus']}"
        if opts["workers"] is not None:
            name += f"/{opts['workers']} workers"
        if opts["agents"] is not None:
            name += f"/{opts['agents']} agents"
        if opts["nodes"] > 1:
            name += f"/{opts['nodes']} nodes"
        if opts["pgbouncer"]:
            name += "/pgbouncer"
        if opts["transaction_mode"]:
            name += "/transaction mode"
        if opts["pair"]:
            name += f"/pair {opts['pair']}"
        if opts["statements"]:
            name += "/statements"
        results.setdefault("load", {})[name] = result
        write_results(path, results)
        self.out(f"wrote the load figures to {path}")

    # --- side by side with mem0 (bench/versus.py) ------------------------------------

    def versus_mem0(self, opts: dict) -> None:
        """The comparison alone; its figures go under "versus_mem0" in --output, next to
        whatever figures the file already holds."""
        requests = 300 if opts["requests"] is None else opts["requests"]
        if requests < 1:
            raise CommandError("--requests must be positive")
        if opts["workers"] is not None and opts["workers"] < 1:
            raise CommandError("--workers must be positive")
        if not opts["locomo"].exists():
            raise CommandError(f"LoCoMo dataset not found at {opts['locomo']} (use --locomo PATH)")
        try:
            mixed = mixed_options(opts)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        # MiniLM, as mem0 is given; `auto` would fall back to hashing without the model.
        embedder = "local" if opts["embedder"] == "auto" else opts["embedder"]
        logging.getLogger("httpx").setLevel(logging.WARNING)
        with throwaway_database(self.out, durable=True) as data_dir:
            result = run_versus_bench(
                data_dir=data_dir,
                mem0_url=opts["versus_mem0"],
                mem0_key=opts["mem0_key"],
                dataset=opts["locomo"],
                requests=requests,
                embedder=embedder,
                workers=opts["workers"],
                out=self.out,
                **mixed,
            )
            result["postgres"] = durability()
        stamp(result)
        versus_table(result, self.out)
        path = opts["output"]
        results = read_results(path)
        results["versus_mem0"] = result
        write_results(path, results)
        self.out(f"wrote the side-by-side figures to {path}")

    # --- latency ---------------------------------------------------------------------------

    def latency(
        self, data_dir: Path, scales: list[int], requests: int, *, ingest_batches: int | None
    ) -> tuple[dict, dict | None]:
        """The latency tables; and, given `ingest_batches`, the ingest figure on the same server
        (after the latency requests, with the tenant at its largest)."""
        tenant = tenant_get_or_create(slug="bench")
        out: dict = {}
        loaded = 0
        with ApiServer(data_dir, embedder="hashing") as server:
            for scale in scales:
                jobs = []
                per_agent = min(latency.PER_AGENT, scale)
                while loaded < scale:
                    index = loaded // per_agent
                    agent = agent_get_or_create(tenant=tenant, slug=f"bench-{index}")
                    agent.entry_cap = 10_000_000  # eviction is not what this measures
                    agent.save(update_fields=["entry_cap"])
                    count = min(per_agent, scale - loaded)
                    jobs.append(
                        {
                            "tenant_id": tenant.pk,
                            "agent_id": agent.pk,
                            "agent_index": index,
                            "count": count,
                        }
                    )
                    loaded += count
                seconds = latency.bulk_load(jobs, self.out)
                self.out(f"tenant at {loaded} memories (load {seconds:.1f}s); measuring")
                measured = agent_get_or_create(tenant=tenant, slug="bench-0")
                _, key = api_key_create(
                    tenant=tenant, agent=measured, scopes=["read", "write", "admin"]
                )
                out[str(scale)] = {
                    "memories_in_tenant": loaded,
                    "memories_of_agent": per_agent,
                    **latency.measure(
                        base_url=server.base_url,
                        key=key,
                        agent_index=0,
                        count=per_agent,
                        requests=requests,
                    ),
                }
                # Each scale's figures as soon as they are measured: a 1M run takes minutes more.
                self.latency_table({str(scale): out[str(scale)]})
            ingest = None
            if ingest_batches:
                ingest = run_ingest_bench(
                    data_dir=data_dir, batches=ingest_batches, out=self.out, server=server
                )
        return out, ingest

    def latency_table(self, results: dict) -> None:
        self.out("")
        self.out(f"{'operation':<18}{'tenant':>10}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}  target")
        for scale, ops in results.items():
            for name, stats in ops.items():
                if not isinstance(stats, dict):
                    continue
                target = ""
                if name in latency.TARGETS:
                    stat, limit, at = latency.TARGETS[name]
                    if at is None or int(scale) == at:
                        verdict = "ok" if stats[stat] <= limit else "MISSED"
                        target = f"{stat} <= {limit:g} ms: {verdict}"
                self.out(
                    f"{name:<18}{int(scale):>10}{stats['p50']:>9.2f}{stats['p95']:>9.2f}"
                    f"{stats['p99']:>9.2f}  {target}"
                )
        self.out("")

    # --- prune (bench/prune.py) --------------------------------------------------------

    def prune(self, scale: int, samples: int) -> dict | None:
        return run_prune_bench(scale=scale, samples=samples, out=self.out)

    # --- formation (bench/formation.py) ----------------------------------------------

    def formation(
        self,
        data_dir: Path,
        ingest: dict | None,
        batches: int,
        threads: int,
        runs: int,
        embedder: str,
    ) -> dict:
        """The ingest figure (`ingest` when the latency bench took it on its server) and the
        extraction server time."""
        results = {
            "ingest": ingest or run_ingest_bench(data_dir=data_dir, batches=batches, out=self.out),
            "extraction": run_extraction_bench(
                threads=threads, runs_measured=runs, out=self.out, embedder=embedder
            ),
        }
        formation_table(results, self.out)
        return results

    # --- LoCoMo ------------------------------------------------------------------------------

    def locomo(
        self,
        data_dir: Path,
        path: Path,
        embedder: str,
        conversations: int | None,
        questions: int | None,
    ) -> dict:
        tenant = tenant_get_or_create(slug="locomo")
        keys: dict[tuple[int, str], str] = {}

        def key_for(index: int, variant: str) -> str:
            if (index, variant) not in keys:
                agent = agent_get_or_create(tenant=tenant, slug=f"conversation-{index}-{variant}")
                agent.entry_cap = 100_000
                agent.save(update_fields=["entry_cap"])
                keys[index, variant] = api_key_create(
                    tenant=tenant, agent=agent, scopes=["read", "write"]
                )[1]
            return keys[index, variant]

        with ApiServer(data_dir, embedder=embedder) as server:
            result = run_locomo(
                path=path,
                base_url=server.base_url,
                key_for_conversation=key_for,
                conversations=conversations,
                questions=questions,
                out=self.out,
            )
        model = Memory.objects.for_tenant(tenant).values_list("embedding_model", flat=True).first()
        result["embedding_model"] = model
        subset = ""
        if result["conversations"] < result["of_conversations"]:
            subset = f" (subset: {result['conversations']} of {result['of_conversations']})"
        self.out("")
        self.out(
            f"LoCoMo evidence recall, {result['questions']} questions, "
            f"{result['turns']} turns, embedder {model}{subset}"
        )
        self.out(f"{'run':<15}{'mode':<10}{'part':<6}" + "".join(f"{'R@' + str(k):>8}" for k in KS))
        for variant, run in result["runs"].items():
            for mode in MODES:
                row = run["modes"][mode]
                parts = {"all": row, **row["halves"]}
                for part, figures in parts.items():
                    self.out(
                        f"{variant:<15}{mode:<10}{part:<6}"
                        + "".join(f"{figures['R@' + str(k)]:>8.1f}" for k in KS)
                    )
        self.out("")
        return result

"""Side by side with mem0 (`bench --versus-mem0 URL`, docs/benchmarks.md "Side by side with
mem0"): the same LoCoMo workload against mem0's own REST server (its `server/main.py`, started
beforehand: bench/mem0-side-by-side.sh) and against MemoryHub's `serve`, interleaved.

MemoryHub runs on a throwaway durable database with `serve`'s defaults and the embedder under
test (local: MiniLM), its query-vector cache off (mem0 has none). The workload:

1. bulk load: every LoCoMo turn stored over HTTP, `CONCURRENCY` requests in flight, one
   MemoryHub agent and one mem0 `user_id` per conversation (mem0 with `infer: false`: no LLM);
2. N sequential writes of single turns (to an agent / user of their own, MemoryHub with its
   default look-alike check);
3. N sequential hybrid searches and N sequential semantic searches of LoCoMo questions, each in
   its conversation's agent / user, top 10 (mem0 has one search: its own, asked in both phases);
4. the mixed load (bench/versus_mixed.py): 8 clients (threads, each a closed loop on its keep-alive
   connection) for a fixed time, each request drawn 30% store (a LoCoMo turn's text as a new
   memory of its conversation's agent / user), 40% search (MemoryHub hybrid, mem0 its own, top
   10, a LoCoMo question in its conversation) and 30% read by id of a memory the bulk load
   stored. The systems take turns round by round (each system the same requests
   in the same order). Reported: requests answered per second, p50/p99, errors, and the server's
   CPU per request (user + system time of the server's process tree and of its PostgreSQL's,
   `/proc`, over the timed windows), and MemoryHub's throughput and CPU per request against
   mem0's.

`phases` runs only some of them; the searches and the mixed load read what the bulk load
stored, so they need it.

The two systems take turns: in the sequential phases request by request, in the bulk load block
by block (`BLOCK` turns, each block's `CONCURRENCY` stripes in flight), and which of the two goes
first alternates, so that whatever the shared machine does meanwhile falls on both alike. Each
phase's order is kept with the figures ("H" MemoryHub, "M" mem0). Reported per call: p50/p95 of
each system and how many times faster MemoryHub is (mem0's time over MemoryHub's; for the bulk
load, memories per second), and the evidence recall@k of both systems' searches on the questions
asked (the metric of bench/locomo.py).
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import locomo
from bench.latency import percentiles
from bench.load import _postmaster, serving
from bench.load_client import Client
from bench.server import Progress
from bench.versus_mixed import (
    MIXED_CLIENTS,
    MIXED_DURATION,
    MIXED_WARMUP,
    MixedPools,
    measurable,
    mem0_processes,
    mixed_table,
    run_mixed,
)
from bench.versus_sides import (
    LETTER,
    STALE,
    SYSTEMS,
    TOP_K,
    BenchRequestError,
    Mem0Side,
    MemoryHubSide,
    Request,
    order_of,
)
from memories.models import Memory
from memoryhub.supervisor import default_workers

BLOCK = 32  # bulk-load turns one system stores before the other takes its turn
CONCURRENCY = locomo.CONCURRENCY  # bulk-load requests in flight
KS = tuple(k for k in locomo.KS if k <= TOP_K)
WARMUP = 5  # untimed requests of each sequential phase, each system
TARGET = 2.0  # "every call ≥ 2× faster at p50" (docs/benchmarks.md, Targets)
# What MemoryHub's server is started with here: the query-vector caches (each process's and the
# one its processes share) off, as mem0 has none.
SERVER_ENV: dict[str, str | None] = {
    "MEMORYHUB_EMBEDDING_CACHE": "0",
    "MEMORYHUB_EMBEDDING_SHARED_CACHE": "0",
}
PHASES = ("bulk", "write", "search_hybrid", "search_semantic", "mixed")
NEED_BULK = ("search_hybrid", "search_semantic", "mixed")  # they read what the bulk load stored
SEQUENTIAL = ("write", "search_hybrid", "search_semantic")
# Where bench/mem0-side-by-side.sh keeps mem0's data by default: beside the repository.
DEFAULT_MEM0_DATA = Path(os.environ.get("MEM0_DATA") or settings.BASE_DIR.parent / "mem0data")


class Timer:
    """Sends a side's requests on one keep-alive connection and times each (ms)."""

    def __init__(self, side):
        self.side = side
        self.client = Client(side.base_url, "")
        self.client.headers = {"Content-Type": "application/json"}

    def send(self, request: Request) -> tuple[float, int, dict | list | None]:
        try:
            return self._send(request)
        except STALE:
            # A keep-alive connection the server closed while it idled (uvicorn closes one after
            # 5 s: the other system's bulk block can take longer): nothing was received on it;
            # sent again on a new connection, and only that is timed.
            return self._send(request)

    def _send(self, request: Request) -> tuple[float, int, dict | list | None]:
        started = time.perf_counter()
        status = self.client.request(request.method, request.path, request.body, request.headers)
        elapsed = (time.perf_counter() - started) * 1000
        if not self.side.accepted(status):
            detail = self.client.body[:500].decode(errors="replace")
            raise BenchRequestError(
                f"{self.side.name} {request.method} {request.path}: {status} {detail}"
            )
        answer = json.loads(self.client.body) if self.client.body else None
        return elapsed, status, answer

    def close(self) -> None:
        self.client.close()


def turns_in_order(conversations: list[locomo.Conversation]) -> list[tuple[int, locomo.Turn]]:
    return [(index, turn) for index, c in enumerate(conversations) for turn in c.turns]


_T = TypeVar("_T")


def round_robin(lists: list[list[_T]]) -> Iterator[tuple[int, _T]]:
    """(list index, item), one from each list in turn: the first of each, then the second..."""
    for row in zip_longest(*lists):
        for index, item in enumerate(row):
            if item is not None:
                yield index, item


def add_mixed_arguments(parser) -> None:
    """`bench --versus-mem0`'s options of its phases and its mixed load (`--clients` is the
    command's own, shared with `--load`)."""
    parser.add_argument(
        "--versus-phases",
        metavar="PHASES",
        help=f"--versus-mem0: only these phases, a comma list of {','.join(PHASES)} "
        "(default all); the searches and the mixed load need bulk",
    )
    parser.add_argument(
        "--mixed-duration",
        type=float,
        default=MIXED_DURATION,
        metavar="SECONDS",
        help="--versus-mem0: the mixed load's timed seconds, each system "
        f"(default {MIXED_DURATION:g})",
    )
    parser.add_argument(
        "--mem0-data",
        type=Path,
        default=DEFAULT_MEM0_DATA,
        metavar="DIR",
        help="--versus-mem0: mem0's data folder (bench/mem0-side-by-side.sh's MEM0_DATA; "
        "default: mem0data beside the repository): its server's and PostgreSQL's pids, "
        "for the mixed load's CPU per request",
    )


def mixed_options(opts: dict) -> dict:
    """`run_versus_bench`'s arguments from the command's options (`add_mixed_arguments`);
    ValueError for what cannot run."""
    try:
        phases = parse_phases(opts["versus_phases"])
    except ValueError as exc:
        raise ValueError(f"--versus-phases: {exc}") from exc
    if "mixed" in phases and (opts["mixed_duration"] <= 0 or opts["clients"] < 1):
        raise ValueError("--mixed-duration and --clients must be positive")
    return {
        "phases": phases,
        "mixed_duration": opts["mixed_duration"],
        "mixed_clients": opts["clients"],
        "mem0_data": opts["mem0_data"] if opts["mem0_data"].is_dir() else None,
    }


def parse_phases(text: str | None) -> tuple[str, ...]:
    """`--versus-phases`: a comma list of `PHASES` (None or empty: all), in the order they run;
    ValueError for an unknown one, or for one that reads what the bulk load stored without it."""
    if not text or not text.strip():
        return PHASES
    asked = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in asked if name not in PHASES]
    if unknown:
        raise ValueError(f"unknown phase(s) {', '.join(unknown)}; phases: {', '.join(PHASES)}")
    needing = [name for name in asked if name in NEED_BULK]
    if needing and "bulk" not in asked:
        raise ValueError(
            f"{', '.join(needing)} read(s) what the bulk load stores: add bulk "
            f"(e.g. bulk,{','.join(needing)})"
        )
    return tuple(name for name in PHASES if name in asked)


def run_versus(
    *,
    hub: MemoryHubSide,
    mem0: Mem0Side,
    conversations: list[locomo.Conversation],
    requests: int,
    out: Callable[[str], None] = print,
    block: int = BLOCK,
    warmup: int = WARMUP,
    phases_run: tuple[str, ...] = PHASES,
    mixed_duration: float = MIXED_DURATION,
    mixed_clients: int = MIXED_CLIENTS,
    mixed_warmup: float = MIXED_WARMUP,
    cpu_roots: dict[str, dict[str, list[int]]] | None = None,
) -> dict:
    """The workload of the module's docstring against both sides (the phases in `phases_run`);
    returns the figures. `cpu_roots`: each system's processes whose CPU the mixed load counts
    (`{"serve": [pid], "postgres": [postmaster pid]}`; a system without both: no CPU figure)."""
    sides = {"memoryhub": hub, "mem0": mem0}
    ids: dict[str, dict[str, str]] = {name: {} for name in SYSTEMS}  # memory id → dia_id
    stored: dict[str, list[tuple[int, str]]] = {name: [] for name in SYSTEMS}  # (conv., id)
    phases: dict[str, dict] = {}
    stripes = {name: [Timer(side) for _ in range(CONCURRENCY)] for name, side in sides.items()}
    single = {name: stripes[name][0] for name in SYSTEMS}
    texts = [turn.text for _, turn in round_robin([c.turns for c in conversations])]
    if not texts:
        raise ValueError("the dataset has no turns")
    asked = list(round_robin([c.questions for c in conversations]))
    if not asked and any(name in NEED_BULK for name in phases_run):
        raise ValueError("the dataset has no questions with evidence")
    chosen = [asked[i % len(asked)] for i in range(warmup + requests)] if asked else []
    recall: dict[str, dict] = {name: {} for name in SYSTEMS}  # system → mode → R@k
    try:
        if "bulk" in phases_run:
            phases["bulk"] = _bulk(sides, stripes, conversations, ids, block, out, stored)
        if "write" in phases_run:
            writes = [texts[i % len(texts)] for i in range(warmup + requests)]
            phases["write"], _ = _sequential(
                "write", sides, single, lambda side, i: side.write(writes[i]), requests, warmup, out
            )
        for mode in ("hybrid", "semantic"):
            phase = f"search_{mode}"
            if phase not in phases_run:
                continue
            phases[phase], answers = _sequential(
                phase,
                sides,
                single,
                lambda side, i, mode=mode: side.search(chosen[i][0], chosen[i][1].question, mode),
                requests,
                warmup,
                out,
            )
            for name in SYSTEMS:
                recall[name][mode] = _recall(sides[name], answers[name], chosen[warmup:], ids[name])
    finally:
        for timers in stripes.values():
            for timer in timers:
                timer.close()
    if "mixed" in phases_run:
        pools = MixedPools(
            turns=[(c, turn.text) for c, turn in turns_in_order(conversations)],
            questions=[(c, q.question) for c, q in asked],
            stored=stored,
        )
        phases["mixed"] = run_mixed(
            sides,
            pools,
            cpu_roots or {},
            clients=mixed_clients,
            duration=mixed_duration,
            warmup=mixed_warmup,
            out=out,
        )
    result: dict[str, Any] = {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "phases_run": list(phases_run),
        "requests": requests,
        "warmup_requests": warmup,
        "bulk_concurrency": CONCURRENCY,
        "bulk_block": block,
        "top_k": TOP_K,
        "interleaving": "sequential calls alternate request by request, the bulk load block "
        "by block and the mixed load round by round; the system that goes first alternates "
        "(order: H MemoryHub, M mem0)",
        "phases": phases,
        "machine_load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    if any(recall.values()):
        questions = chosen[warmup:]
        result["recall"] = {
            "questions": len(questions),
            "distinct_questions": len({(c, q.question) for c, q in questions}),
            **recall,
        }
    return result


def _bulk(sides, stripes, conversations, ids, block, out, stored) -> dict:
    turns = turns_in_order(conversations)
    blocks = [turns[i : i + block] for i in range(0, len(turns), block)]
    latencies: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    seconds = dict.fromkeys(SYSTEMS, 0.0)
    order = []
    progress = Progress(f"bulk load, {CONCURRENCY} in flight, both systems", 2 * len(turns))
    with ThreadPoolExecutor(CONCURRENCY) as pool:
        for unit, part in enumerate(blocks):
            for name in order_of(unit):
                side, timers = sides[name], stripes[name]

                def send_stripe(n: int, side=side, timers=timers, part=part):
                    sent = []
                    for conversation, turn in part[n::CONCURRENCY]:
                        ms, status, answer = timers[n].send(side.bulk(conversation, turn))
                        sent.append((conversation, turn, ms, status, answer))
                    return sent

                started = time.perf_counter()
                done = [
                    item for stripe in pool.map(send_stripe, range(CONCURRENCY)) for item in stripe
                ]
                seconds[name] += time.perf_counter() - started
                for conversation, turn, ms, status, answer in done:
                    latencies[name].append(ms)
                    for memory_id in side.stored_ids(status, answer):
                        ids[name][memory_id] = turn.dia_id
                        stored[name].append((conversation, memory_id))
                order.append(LETTER[name])
                progress.advance(len(part))
    progress.close()
    figures = {
        name: {
            **percentiles(latencies[name]),
            "seconds": round(seconds[name], 2),
            "memories_per_s": round(len(turns) / seconds[name], 1) if seconds[name] else None,
            "stored": len(stored[name]),
        }
        for name in SYSTEMS
    }
    rates = [figures[name]["memories_per_s"] for name in SYSTEMS]
    result: dict[str, Any] = {**figures, "faster": _faster(figures), "order": "".join(order)}
    result["faster"]["throughput"] = round(rates[0] / rates[1], 2) if all(rates) else None
    out(
        f"bulk load: MemoryHub {rates[0]} memories/s, mem0 {rates[1]} "
        f"({result['faster']['throughput']}x)"
    )
    return result


def _sequential(phase, sides, timers, make, requests, warmup, out) -> tuple[dict, dict]:
    """`warmup` + `requests` calls to both sides, alternating; the timed ones' figures and
    every timed answer of each side."""
    latencies: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    answers: dict[str, list] = {name: [] for name in SYSTEMS}
    order = []
    progress = Progress(f"{phase}, sequential, alternating", requests)
    for i in range(warmup + requests):
        for name in order_of(i):
            ms, _, answer = timers[name].send(make(sides[name], i))
            if i >= warmup:
                latencies[name].append(ms)
                answers[name].append(answer)
                order.append(LETTER[name])
        if i >= warmup:
            progress.advance()
    progress.close()
    figures = {name: percentiles(latencies[name]) for name in SYSTEMS}
    result: dict[str, Any] = {**figures, "faster": _faster(figures), "order": "".join(order)}
    out(
        f"{phase}: MemoryHub p50 {figures['memoryhub']['p50']} ms, mem0 "
        f"{figures['mem0']['p50']} ms ({result['faster']['p50']}x at p50)"
    )
    return result, answers


def _faster(figures: dict) -> dict:
    """How many times faster MemoryHub is at p50 and p95: mem0's time over MemoryHub's."""
    faster = {}
    for stat in ("p50", "p95"):
        hub, mem0 = figures["memoryhub"][stat], figures["mem0"][stat]
        faster[stat] = round(mem0 / hub, 2) if hub and mem0 else None
    faster["target_met"] = faster["p50"] is not None and faster["p50"] >= TARGET
    return faster


def _recall(side, answers: list, questions: list, dia_of: dict[str, str]) -> dict:
    sums = dict.fromkeys(KS, 0.0)
    for answer, (_, question) in zip(answers, questions, strict=True):
        ranked = [dia_of.get(memory_id) for memory_id in side.hit_ids(answer)]
        for k in KS:
            sums[k] += locomo.evidence_recall(question.evidence, ranked, k)
    return {f"R@{k}": round(100 * sums[k] / max(len(questions), 1), 1) for k in KS}


def run_tag() -> str:
    """A tag unique to this run (mem0's user ids carry it)."""
    return f"memoryhub-bench-{time.strftime('%Y%m%d%H%M%S')}-{secrets.token_hex(3)}"


def versus_table(result: dict, out: Callable[[str], None]) -> None:
    phases = result["phases"]
    how = [f"bulk {result['bulk_concurrency']} in flight"] if "bulk" in phases else []
    if any(phase in phases for phase in SEQUENTIAL):
        how.append(f"{result['requests']} of each sequential call")
    out("")
    out(
        f"side by side with mem0 ({result['mem0']['url']}): {result['turns']} LoCoMo turns, "
        f"phases {', '.join(phases)} ({', '.join(how)}, interleaved); MemoryHub: `serve` "
        f"({result['memoryhub']['workers']} web workers), embedder {result['memoryhub']['embedder']}"
    )
    rows = [phase for phase in ("bulk", *SEQUENTIAL) if phase in phases]
    if rows:
        out(
            f"{'call':<17}{'MemoryHub p50/p95 ms':>22}{'mem0 p50/p95 ms':>18}"
            f"{'faster p50/p95':>16}  target p50 >= {TARGET:g}x"
        )
    for phase in rows:
        row = phases[phase]
        hub, mem0, faster = row["memoryhub"], row["mem0"], row["faster"]
        verdict = "met" if faster["target_met"] else "MISSED"
        out(
            f"{phase:<17}{hub['p50']:>12.1f} /{hub['p95']:>7.1f}{mem0['p50']:>10.1f} /"
            f"{mem0['p95']:>6.1f}{faster['p50']:>10.2f} /{faster['p95']:>5.2f}  {verdict}"
        )
    if "bulk" in phases:
        bulk = phases["bulk"]
        out(
            f"bulk load: MemoryHub {bulk['memoryhub']['memories_per_s']} memories/s, mem0 "
            f"{bulk['mem0']['memories_per_s']} ({bulk['faster']['throughput']}x)"
        )
    if "mixed" in phases:
        mixed_table(phases["mixed"], out)
    recall = result.get("recall") or {}
    for name in SYSTEMS if recall else ():
        out(
            f"evidence recall, {recall['questions']} questions, {name}: "
            + "; ".join(
                f"{mode} " + ", ".join(f"{k} {v}" for k, v in figures.items())
                for mode, figures in recall[name].items()
            )
        )
    out("")


def run_versus_bench(
    *,
    data_dir: Path,
    mem0_url: str,
    mem0_key: str | None,
    dataset: Path,
    requests: int,
    embedder: str,
    workers: int | None,
    out: Callable[[str], None],
    phases: tuple[str, ...] = PHASES,
    mixed_duration: float = MIXED_DURATION,
    mixed_clients: int = MIXED_CLIENTS,
    mem0_data: Path | None = None,
) -> dict:
    """MemoryHub's side on `data_dir` (a throwaway database: one agent and key per LoCoMo
    conversation and one for the writes, then `serve` with its defaults but the query-vector
    cache), mem0's at `mem0_url` (already running), and the comparison between them.
    `mem0_data`: mem0's data folder as bench/mem0-side-by-side.sh makes it (its server's pid in
    `server.pid`, its PostgreSQL in `pg/`), for the mixed load's CPU figures."""
    conversations = locomo.load(dataset)
    tenant = tenant_get_or_create(slug="versus-mem0")

    def key_for(slug: str) -> str:
        agent = agent_get_or_create(tenant=tenant, slug=slug)
        agent.entry_cap = 100_000  # eviction is not what this measures
        agent.save(update_fields=["entry_cap"])
        return api_key_create(tenant=tenant, agent=agent, scopes=["read", "write"])[1]

    keys = [key_for(f"conversation-{index}") for index in range(len(conversations))]
    write_key = key_for("writes")
    tag = run_tag()
    mem0_url = mem0_url.rstrip("/")
    mem0_roots = mem0_processes(mem0_data)
    with serving(data_dir, embedder=embedder, out=out, workers=workers, env=SERVER_ENV) as (
        base_url,
        serve_pid,
    ):
        hub = MemoryHubSide(base_url, keys, write_key)
        mem0 = Mem0Side(mem0_url, mem0_key, tag, [c.sample_id for c in conversations])
        hub_roots = {"serve": [serve_pid], "postgres": _postmaster(data_dir)}
        result = run_versus(
            hub=hub,
            mem0=mem0,
            conversations=conversations,
            requests=requests,
            out=out,
            phases_run=phases,
            mixed_duration=mixed_duration,
            mixed_clients=mixed_clients,
            cpu_roots={"memoryhub": hub_roots, "mem0": mem0_roots},
        )
    model = Memory.objects.for_tenant(tenant).values_list("embedding_model", flat=True).first()
    result["memoryhub"] = {
        "embedder": embedder,
        "embedding_model": model,
        "workers": workers or default_workers(),
        "env": SERVER_ENV,
    }
    result["mem0"] = {
        "url": mem0_url,
        "user_id_prefix": tag,
        "authenticated": bool(mem0_key),
        "data_dir": str(mem0_data) if mem0_data else None,
        "processes_measured": mem0_roots if measurable(mem0_roots) else None,
    }
    result["dataset"] = str(dataset)
    return result

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
   its conversation's agent / user, top 10 (mem0 has one search: its own, asked in both phases).

The two systems take turns: in the sequential phases request by request, in the bulk load block
by block (`BLOCK` turns, each block's `CONCURRENCY` stripes in flight), and which of the two goes
first alternates, so that whatever the shared machine does meanwhile falls on both alike. Each
phase's order is kept with the figures ("H" MemoryHub, "M" mem0). Reported per call: p50/p95 of
each system and how many times faster MemoryHub is (mem0's time over MemoryHub's; for the bulk
load, memories per second), and the evidence recall@k of both systems' searches on the questions
asked (the metric of bench/locomo.py).
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypeVar

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import locomo
from bench.latency import percentiles
from bench.load import serving
from bench.load_client import Client
from bench.server import Progress
from memories.models import Memory
from memoryhub.supervisor import default_workers

SYSTEMS = ("memoryhub", "mem0")
LETTER = {"memoryhub": "H", "mem0": "M"}
BLOCK = 32  # bulk-load turns one system stores before the other takes its turn
CONCURRENCY = locomo.CONCURRENCY  # bulk-load requests in flight
TOP_K = 10
KS = tuple(k for k in locomo.KS if k <= TOP_K)
WARMUP = 5  # untimed requests of each sequential phase, each system
TARGET = 2.0  # "every call ≥ 2× faster at p50" (docs/benchmarks.md, Targets)
# What MemoryHub's server is started with here: the query-vector caches (each process's and the
# one its processes share) off, as mem0 has none.
SERVER_ENV: dict[str, str | None] = {
    "MEMORYHUB_EMBEDDING_CACHE": "0",
    "MEMORYHUB_EMBEDDING_SHARED_CACHE": "0",
}
PHASES = ("bulk", "write", "search_hybrid", "search_semantic")
# What sending on a connection the server has closed raises (load_client.Client closes its side
# then, and the next request opens a new one).
STALE = (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected)


class BenchRequestError(RuntimeError):
    """A request of the comparison answered with an error (the bench stops: no figure is taken
    over failed requests)."""


@dataclass
class Request:
    method: str
    path: str
    body: dict
    headers: dict


class MemoryHubSide:
    """MemoryHub's REST API: one agent key per conversation, one for the single writes."""

    name = "memoryhub"

    def __init__(self, base_url: str, keys: list[str], write_key: str):
        self.base_url, self.keys, self.write_key = base_url, keys, write_key

    def _auth(self, key: str) -> dict:
        return {"Authorization": f"Bearer {key}"}

    def bulk(self, conversation: int, turn: locomo.Turn) -> Request:
        # Stored as an agent stores a conversation's turns: with their metadata (the headline
        # LoCoMo figure), every turn kept.
        body = locomo.turn_body(turn, metadata=True)
        return Request("POST", "/api/v1/memories", body, self._auth(self.keys[conversation]))

    def write(self, text: str) -> Request:
        return Request("POST", "/api/v1/memories", {"text": text}, self._auth(self.write_key))

    def search(self, conversation: int, query: str, mode: str) -> Request:
        body = {"query": query, "mode": mode, "limit": TOP_K}
        return Request("POST", "/api/v1/search", body, self._auth(self.keys[conversation]))

    def stored_ids(self, status: int, answer: dict) -> list[str]:
        # 422: a turn that looks like a secret is refused, as in bench/locomo.py.
        return [] if status == 422 else [answer["memory_id"]]

    def hit_ids(self, answer: dict) -> list[str]:
        return [hit["id"] for hit in answer["memories"]]

    def accepted(self, status: int) -> bool:
        return status in (200, 201, 422)


class Mem0Side:
    """mem0's REST server (server/main.py): `POST /memories` with `infer: false` (each message
    stored as it is, no LLM), `POST /search` with a `user_id` filter; `X-API-Key` when given.
    Every `user_id` carries this run's tag, so runs against one mem0 never see each other's."""

    name = "mem0"

    def __init__(self, base_url: str, key: str | None, tag: str, sample_ids: list[str]):
        self.base_url = base_url
        self.headers = {"X-API-Key": key} if key else {}
        self.users = [f"{tag}-{sample_id}" for sample_id in sample_ids]
        self.write_user = f"{tag}-writes"

    def _add(self, text: str, user: str, metadata: dict | None = None) -> dict:
        body = {"messages": [{"role": "user", "content": text}], "user_id": user, "infer": False}
        if metadata:
            body["metadata"] = metadata
        return body

    def bulk(self, conversation: int, turn: locomo.Turn) -> Request:
        # The same metadata as MemoryHub's (mem0 keeps it with the memory; its search does not
        # rank by it), and the turn's id.
        metadata = {
            "dia_id": turn.dia_id,
            "thread_id": turn.metadata.get("thread_id"),
            "occurred_at": turn.metadata.get("occurred_at"),
        }
        body = self._add(turn.text, self.users[conversation], metadata)
        return Request("POST", "/memories", body, self.headers)

    def write(self, text: str) -> Request:
        return Request("POST", "/memories", self._add(text, self.write_user), self.headers)

    def search(self, conversation: int, query: str, mode: str) -> Request:
        body = {"query": query, "filters": {"user_id": self.users[conversation]}, "top_k": TOP_K}
        return Request("POST", "/search", body, self.headers)

    def stored_ids(self, status: int, answer: dict | list) -> list[str]:
        return [item["id"] for item in _results(answer)]

    def hit_ids(self, answer: dict | list) -> list[str]:
        return [item["id"] for item in _results(answer)]

    def accepted(self, status: int) -> bool:
        return status in (200, 201)


def _results(answer: dict | list) -> list[dict]:
    """mem0 answers `{"results": [...]}` (older servers: the list alone)."""
    return answer.get("results", []) if isinstance(answer, dict) else answer


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


def order_of(unit: int) -> tuple[str, str]:
    """Which system goes first in the `unit`-th request or block: MemoryHub in even ones."""
    return SYSTEMS if unit % 2 == 0 else SYSTEMS[::-1]


def run_versus(
    *,
    hub: MemoryHubSide,
    mem0: Mem0Side,
    conversations: list[locomo.Conversation],
    requests: int,
    out: Callable[[str], None] = print,
    block: int = BLOCK,
    warmup: int = WARMUP,
) -> dict:
    """The workload of the module's docstring against both sides; returns the figures."""
    sides = {"memoryhub": hub, "mem0": mem0}
    ids: dict[str, dict[str, str]] = {name: {} for name in SYSTEMS}  # memory id → dia_id
    phases: dict[str, dict] = {}
    stripes = {name: [Timer(side) for _ in range(CONCURRENCY)] for name, side in sides.items()}
    single = {name: stripes[name][0] for name in SYSTEMS}
    try:
        phases["bulk"] = _bulk(sides, stripes, conversations, ids, block, out)
        texts = [turn.text for _, turn in round_robin([c.turns for c in conversations])]
        if not texts:
            raise ValueError("the dataset has no turns")
        writes = [texts[i % len(texts)] for i in range(warmup + requests)]
        phases["write"], _ = _sequential(
            "write", sides, single, lambda side, i: side.write(writes[i]), requests, warmup, out
        )
        asked = list(round_robin([c.questions for c in conversations]))
        if not asked:
            raise ValueError("the dataset has no questions with evidence")
        chosen = [asked[i % len(asked)] for i in range(warmup + requests)]
        recall: dict[str, dict] = {name: {} for name in SYSTEMS}  # system → mode → R@k
        for mode in ("hybrid", "semantic"):
            phase = f"search_{mode}"
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
    questions = chosen[warmup:]
    return {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "requests": requests,
        "warmup_requests": warmup,
        "bulk_concurrency": CONCURRENCY,
        "bulk_block": block,
        "top_k": TOP_K,
        "interleaving": "sequential calls alternate request by request and the bulk load block "
        "by block; the system that goes first alternates (order: H MemoryHub, M mem0)",
        "phases": phases,
        "recall": {
            "questions": len(questions),
            "distinct_questions": len({(c, q.question) for c, q in questions}),
            **recall,
        },
        "machine_load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def _bulk(sides, stripes, conversations, ids, block, out) -> dict:
    turns = turns_in_order(conversations)
    blocks = [turns[i : i + block] for i in range(0, len(turns), block)]
    latencies: dict[str, list[float]] = {name: [] for name in SYSTEMS}
    seconds = dict.fromkeys(SYSTEMS, 0.0)
    stored = dict.fromkeys(SYSTEMS, 0)
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
                        sent.append((turn, ms, status, answer))
                    return sent

                started = time.perf_counter()
                done = [
                    item for stripe in pool.map(send_stripe, range(CONCURRENCY)) for item in stripe
                ]
                seconds[name] += time.perf_counter() - started
                for turn, ms, status, answer in done:
                    latencies[name].append(ms)
                    for memory_id in side.stored_ids(status, answer):
                        ids[name][memory_id] = turn.dia_id
                        stored[name] += 1
                order.append(LETTER[name])
                progress.advance(len(part))
    progress.close()
    figures = {
        name: {
            **percentiles(latencies[name]),
            "seconds": round(seconds[name], 2),
            "memories_per_s": round(len(turns) / seconds[name], 1) if seconds[name] else None,
            "stored": stored[name],
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
    out("")
    out(
        f"side by side with mem0 ({result['mem0']['url']}): {result['turns']} LoCoMo turns "
        f"bulk-loaded {result['bulk_concurrency']} in flight, then {result['requests']} of each "
        f"call, interleaved; MemoryHub: `serve` ({result['memoryhub']['workers']} web workers), "
        f"embedder {result['memoryhub']['embedder']}"
    )
    out(
        f"{'call':<17}{'MemoryHub p50/p95 ms':>22}{'mem0 p50/p95 ms':>18}"
        f"{'faster p50/p95':>16}  target p50 >= {TARGET:g}x"
    )
    for phase in PHASES:
        row = result["phases"][phase]
        hub, mem0, faster = row["memoryhub"], row["mem0"], row["faster"]
        verdict = "met" if faster["target_met"] else "MISSED"
        out(
            f"{phase:<17}{hub['p50']:>12.1f} /{hub['p95']:>7.1f}{mem0['p50']:>10.1f} /"
            f"{mem0['p95']:>6.1f}{faster['p50']:>10.2f} /{faster['p95']:>5.2f}  {verdict}"
        )
    bulk = result["phases"]["bulk"]
    out(
        f"bulk load: MemoryHub {bulk['memoryhub']['memories_per_s']} memories/s, mem0 "
        f"{bulk['mem0']['memories_per_s']} ({bulk['faster']['throughput']}x)"
    )
    recall = result["recall"]
    for name in SYSTEMS:
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
) -> dict:
    """MemoryHub's side on `data_dir` (a throwaway database: one agent and key per LoCoMo
    conversation and one for the writes, then `serve` with its defaults but the query-vector
    cache), mem0's at `mem0_url` (already running), and the comparison between them."""
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
    with serving(data_dir, embedder=embedder, out=out, workers=workers, env=SERVER_ENV) as (
        base_url,
        _,
    ):
        hub = MemoryHubSide(base_url, keys, write_key)
        mem0 = Mem0Side(mem0_url, mem0_key, tag, [c.sample_id for c in conversations])
        result = run_versus(
            hub=hub, mem0=mem0, conversations=conversations, requests=requests, out=out
        )
    model = Memory.objects.for_tenant(tenant).values_list("embedding_model", flat=True).first()
    result["memoryhub"] = {
        "embedder": embedder,
        "embedding_model": model,
        "workers": workers or default_workers(),
        "env": SERVER_ENV,
    }
    result["mem0"] = {"url": mem0_url, "user_id_prefix": tag, "authenticated": bool(mem0_key)}
    result["dataset"] = str(dataset)
    return result

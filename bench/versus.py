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
4. the mixed load: `MIXED_CLIENTS` clients (threads, each a closed loop on its keep-alive
   connection) for a fixed time, each request drawn 30% store (a LoCoMo turn's text as a new
   memory of its conversation's agent / user), 40% search (MemoryHub hybrid, mem0 its own, top
   10, a LoCoMo question in its conversation) and 30% read by id of a memory the bulk load
   stored. The systems take turns round by round (`MIXED_ROUNDS`, each system the same requests
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

import http.client
import json
import os
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypeVar

from accounts.services import agent_get_or_create, api_key_create, tenant_get_or_create
from bench import cpu, locomo
from bench.latency import percentiles
from bench.load import _ended_kind, _kind, _postmaster, serving
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
# What MemoryHub's server is started with here: the query-vector cache off, as mem0 has none.
SERVER_ENV: dict[str, str | None] = {"MEMORYHUB_EMBEDDING_CACHE": "0"}
PHASES = ("bulk", "write", "search_hybrid", "search_semantic", "mixed")
NEED_BULK = ("search_hybrid", "search_semantic", "mixed")  # they read what the bulk load stored
SEQUENTIAL = ("write", "search_hybrid", "search_semantic")
MIXED_CLIENTS = 8
MIXED_DURATION = 20.0  # timed seconds of the mixed load, each system
MIXED_ROUNDS = 2  # the duration in that many turns of each system: H M, M H
MIXED_WARMUP = 1.0  # unmeasured seconds at the start of each turn
MIXED_MIX = {"store": 30, "search": 40, "read": 30}
MIXED_SEED = 48
# The mixed load's targets: MemoryHub's throughput ≥ 4× mem0's, its server CPU per request
# ≤ 0.3 of mem0's.
THROUGHPUT_TARGET = 4.0
CPU_TARGET = 0.3
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
    body: dict | None
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

    def store(self, conversation: int, text: str) -> Request:
        body = {"text": text}
        return Request("POST", "/api/v1/memories", body, self._auth(self.keys[conversation]))

    def read(self, conversation: int, memory_id: str) -> Request:
        path = f"/api/v1/memories/{memory_id}"
        return Request("GET", path, None, self._auth(self.keys[conversation]))

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

    def store(self, conversation: int, text: str) -> Request:
        body = self._add(text, self.users[conversation])
        return Request("POST", "/memories", body, self.headers)

    def read(self, conversation: int, memory_id: str) -> Request:
        return Request("GET", f"/memories/{memory_id}", None, self.headers)

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
        phases["mixed"] = _mixed(
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


@dataclass
class MixedPools:
    """What the mixed load's requests are made of: (conversation, text) of every turn, (conversation,
    question) of every question, and each system's memories the bulk load stored."""

    turns: list[tuple[int, str]]
    questions: list[tuple[int, str]]
    stored: dict[str, list[tuple[int, str]]]


def draw(rng: random.Random) -> tuple[str, int]:
    """The next request of a mixed-load client: its operation (`MIXED_MIX`'s weights) and a
    number that picks what it is about (`mixed_request`)."""
    operation = rng.choices(list(MIXED_MIX), list(MIXED_MIX.values()))[0]
    return operation, rng.getrandbits(32)


def mixed_request(side, pools: MixedPools, operation: str, pick: int) -> Request:
    """The request `draw` chose, for `side`: the same turn, question or n-th stored memory for
    both systems."""
    if operation == "store":
        conversation, text = pools.turns[pick % len(pools.turns)]
        return side.store(conversation, text)
    if operation == "search":
        conversation, question = pools.questions[pick % len(pools.questions)]
        return side.search(conversation, question, "hybrid")
    mine = pools.stored[side.name]
    conversation, memory_id = mine[pick % len(mine)]
    return side.read(conversation, memory_id)


def _mixed_client(side, pools, seed, measure_from, stop_at, tally) -> None:
    """One closed-loop client of the mixed load: requests back to back until `stop_at`, those
    begun from `measure_from` on timed (ms, by operation) or counted as errors in `tally`."""
    rng = random.Random(seed)
    client = Client(side.base_url, "")
    client.headers = {"Content-Type": "application/json"}
    latencies: dict[str, list[float]] = {name: [] for name in MIXED_MIX}
    errors: dict[str, int] = {}
    try:
        while True:
            operation, pick = draw(rng)
            request = mixed_request(side, pools, operation, pick)
            started = time.perf_counter()
            if started >= stop_at:
                break
            try:
                try:
                    status = client.request(
                        request.method, request.path, request.body, request.headers
                    )
                except STALE:  # a keep-alive connection closed while idle: sent again
                    status = client.request(
                        request.method, request.path, request.body, request.headers
                    )
                problem = None if side.accepted(status) else str(status)
            except (OSError, http.client.HTTPException) as exc:
                problem = type(exc).__name__
            ended = time.perf_counter()
            if started < measure_from:
                continue
            if problem is None:
                latencies[operation].append((ended - started) * 1000)
            else:
                errors[problem] = errors.get(problem, 0) + 1
    finally:
        client.close()
        tally.append((latencies, errors))


def _cpu_sample(roots: dict[str, list[int]]):
    return cpu.sample_kinds(roots, _kind) if _complete(roots) else None


def _complete(roots: dict[str, list[int]]) -> bool:
    """Both the server's and its PostgreSQL's processes known (else no CPU figure)."""
    return bool(roots.get("serve")) and bool(roots.get("postgres"))


def _mixed(sides, pools, cpu_roots, *, clients, duration, warmup, out) -> dict:
    """`MIXED_ROUNDS` turns of each system, alternating (`order_of`), each `duration /
    MIXED_ROUNDS` seconds timed after `warmup`; the clients of a round draw the same requests
    for both systems."""
    if not pools.questions or not all(pools.stored[name] for name in SYSTEMS):
        raise ValueError("the mixed load needs questions and the bulk load's stored memories")
    per_round = duration / MIXED_ROUNDS
    tallies: dict[str, list] = {name: [] for name in SYSTEMS}
    spent: dict[str, dict[str, float] | None] = {name: {} for name in SYSTEMS}
    seconds = dict.fromkeys(SYSTEMS, 0.0)
    order = []
    for unit in range(MIXED_ROUNDS):
        for name in order_of(unit):
            side, roots = sides[name], cpu_roots.get(name, {})
            began = time.perf_counter()
            measure_from = began + warmup
            stop_at = measure_from + per_round
            threads = [
                threading.Thread(
                    target=_mixed_client,
                    args=(
                        side,
                        pools,
                        f"{MIXED_SEED}-{unit}-{n}",
                        measure_from,
                        stop_at,
                        tallies[name],
                    ),
                    daemon=True,
                )
                for n in range(clients)
            ]
            for thread in threads:
                thread.start()
            time.sleep(max(0.0, measure_from - time.perf_counter()))
            before = _cpu_sample(roots)
            for thread in threads:
                thread.join()
            after = _cpu_sample(roots)
            seconds[name] += per_round
            so_far = spent[name]
            if before is None or after is None or so_far is None:
                spent[name] = None
            else:
                for kind, ms in cpu.kinds_delta_ms(before, after, _ended_kind).items():
                    so_far[kind] = so_far.get(kind, 0.0) + ms
            order.append(LETTER[name])
            out(f"mixed load: {name}, round {unit + 1}/{MIXED_ROUNDS}")
    figures = {name: summarise_mixed(tallies[name], seconds[name], spent[name]) for name in SYSTEMS}
    result: dict[str, Any] = {
        **figures,
        "ratios": mixed_ratios(figures["memoryhub"], figures["mem0"]),
        "order": "".join(order),
        "clients": clients,
        "duration_s": duration,
        "rounds": MIXED_ROUNDS,
        "warmup_s_per_round": warmup,
        "mix_percent": MIXED_MIX,
    }
    ratios = result["ratios"]
    out(
        f"mixed load: MemoryHub {figures['memoryhub']['req_per_s']} req/s, mem0 "
        f"{figures['mem0']['req_per_s']} ({ratios['throughput']}x); CPU per request "
        f"MemoryHub/mem0 {ratios['cpu_per_request']}"
    )
    return result


def summarise_mixed(
    tally: list[tuple[dict[str, list[float]], dict[str, int]]],
    seconds: float,
    spent: dict[str, float] | None,
) -> dict:
    """One system's mixed-load figures from its clients' `tally` over `seconds` timed: answered
    requests per second, p50/p99 (all and by operation), errors, and the server's CPU per
    request answered (`spent`: CPU ms by process kind, None when unknown), its own processes'
    and its PostgreSQL's."""
    by_operation = {
        operation: percentiles([ms for latencies, _ in tally for ms in latencies[operation]])
        for operation in MIXED_MIX
    }
    everything = [ms for latencies, _ in tally for samples in latencies.values() for ms in samples]
    error_kinds: dict[str, int] = {}
    for _, errors in tally:
        for problem, n in errors.items():
            error_kinds[problem] = error_kinds.get(problem, 0) + n
    answered = len(everything) + sum(error_kinds.values())
    overall = percentiles(everything)
    cpu_ms: dict[str, float | None] = dict.fromkeys(("server", "postgres", "total"))
    if spent is not None and answered:
        db = sum(ms for kind, ms in spent.items() if kind.startswith("postgres"))
        server = sum(ms for kind, ms in spent.items() if not kind.startswith("postgres"))
        cpu_ms = {
            "server": round(server / answered, 2),
            "postgres": round(db / answered, 2),
            "total": round((server + db) / answered, 2),
        }
    return {
        "req_per_s": round(len(everything) / seconds, 1) if seconds else None,
        "p50": overall["p50"],
        "p99": overall["p99"],
        "n": overall["n"],
        "answered": answered,
        "errors": sum(error_kinds.values()),
        "error_kinds": error_kinds,
        "seconds": round(seconds, 2),
        "by_operation": by_operation,
        "cpu_ms_per_request": cpu_ms,
    }


def mixed_ratios(hub: dict, mem0: dict) -> dict:
    """MemoryHub's mixed-load throughput over mem0's (target ≥ `THROUGHPUT_TARGET`) and its
    server CPU per request over mem0's (target ≤ `CPU_TARGET`); None where a figure is missing."""
    rates = hub["req_per_s"], mem0["req_per_s"]
    throughput = round(rates[0] / rates[1], 2) if all(rates) else None
    costs = hub["cpu_ms_per_request"]["total"], mem0["cpu_ms_per_request"]["total"]
    per_request = round(costs[0] / costs[1], 3) if costs[0] is not None and costs[1] else None
    return {
        "throughput": throughput,
        "throughput_target": THROUGHPUT_TARGET,
        "throughput_met": throughput is not None and throughput >= THROUGHPUT_TARGET,
        "cpu_per_request": per_request,
        "cpu_per_request_target": CPU_TARGET,
        "cpu_per_request_met": per_request is not None and per_request <= CPU_TARGET,
    }


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
    out("")
    out(
        f"side by side with mem0 ({result['mem0']['url']}): {result['turns']} LoCoMo turns, "
        f"phases {', '.join(phases)} (bulk {result['bulk_concurrency']} in flight, "
        f"{result['requests']} of each sequential call, interleaved); MemoryHub: `serve` "
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


def mixed_table(mixed: dict, out: Callable[[str], None]) -> None:
    """The mixed load's rows: each system's figures, then the two ratios and their targets."""
    out(
        f"mixed load, {mixed['clients']} clients, {mixed['duration_s']:g} s each system "
        f"({mixed['rounds']} rounds, order {mixed['order']}), "
        + "/".join(f"{percent}% {name}" for name, percent in mixed["mix_percent"].items())
    )
    out(
        f"{'system':<11}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}"
        f"{'CPU ms/req (server + PostgreSQL)':>36}"
    )
    for name in SYSTEMS:
        row = mixed[name]
        cost = row["cpu_ms_per_request"]
        cpu_text = (
            f"{cost['total']:.2f} ({cost['server']:.2f} + {cost['postgres']:.2f})"
            if cost["total"] is not None
            else "unknown"
        )
        out(
            f"{name:<11}{row['req_per_s']:>8}{row['p50']:>9.1f}{row['p99']:>9.1f}"
            f"{row['errors']:>8}{cpu_text:>36}"
        )
    ratios = mixed["ratios"]

    def verdict(met: bool, value) -> str:
        return "unknown" if value is None else "met" if met else "MISSED"

    out(
        f"mixed load, MemoryHub/mem0: throughput {ratios['throughput']}x (target >= "
        f"{ratios['throughput_target']:g}x: "
        f"{verdict(ratios['throughput_met'], ratios['throughput'])}); CPU per request "
        f"{ratios['cpu_per_request']} (target <= {ratios['cpu_per_request_target']:g}: "
        f"{verdict(ratios['cpu_per_request_met'], ratios['cpu_per_request'])})"
    )


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
        "processes_measured": mem0_roots if _complete(mem0_roots) else None,
    }
    result["dataset"] = str(dataset)
    return result


def mem0_processes(mem0_data: Path | None) -> dict[str, list[int]]:
    """mem0's server (the pid in `server.pid`) and its PostgreSQL's postmaster (`pg/`), those of
    them running; empty without a folder."""
    if mem0_data is None:
        return {}
    try:
        server = [int((mem0_data / "server.pid").read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        server = []
    roots = {"serve": server, "postgres": _postmaster(mem0_data)}
    return {kind: [pid for pid in pids if cpu.process_cpu(pid)] for kind, pids in roots.items()}

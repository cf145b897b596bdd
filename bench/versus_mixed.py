"""The mixed load of the side-by-side with mem0 (bench/versus.py, its phase `mixed`):
`MIXED_CLIENTS` closed-loop clients (threads, each on its keep-alive connection) for a fixed
time, each request drawn 30% store, 40% search, 30% read by id of a memory the bulk load stored,
the two systems in turns (`MIXED_ROUNDS` each, the first alternating, the same requests for
both); the server's CPU per request read from `/proc` over the timed windows (its process tree
and its PostgreSQL's), and MemoryHub's throughput and CPU per request against mem0's."""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import cpu
from bench.latency import percentiles
from bench.load import _ended_kind, _kind, _postmaster
from bench.load_client import Client
from bench.versus_sides import LETTER, STALE, SYSTEMS, Request, order_of

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
    return cpu.sample_kinds(roots, _kind) if measurable(roots) else None


def measurable(roots: dict[str, list[int]]) -> bool:
    """Both the server's and its PostgreSQL's processes known (else no CPU figure)."""
    return bool(roots.get("serve")) and bool(roots.get("postgres"))


def run_mixed(sides, pools, cpu_roots, *, clients, duration, warmup, out) -> dict:
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

"""The paired mixed load (`bench --load --pair observability`): what metrics, the access log and
events cost a request, measured so that the machine's own speed cancels out.

Two runs of `bench --load` one after the other differ by more than the few percent this is
about: on a shared machine one run's throughput can be a quarter above the next one's, and the
CPU a request takes moves with it. So both configurations run at the same time instead: one
seeded database, two `serve`s on it (the same code and embedder, each with half the web
processes `serve` would run alone), and the clients split between them, all timed over the same
window. Whatever the machine does meanwhile, both sides see it; what differs is their cost. Two
rounds: in the second the servers are started in the other order and every client changes
sides, so that neither favours a side (`--pair same`, two identical sides, measures what is
left of that: the comparison's own noise).

- "on": as a service runs: `MEMORYHUB_METRICS_TOKEN` set (`serve` gives its processes the
  multiprocess directory), the access log on, events written with every change.
- "off": none of them: no token, `MEMORYHUB_ACCESS_LOG=0`, `MEMORYHUB_BENCH_NO_EVENTS=1`.

The figures of each side: its requests per second and latency percentiles (summarise), and the
CPU its web processes spent per request it answered. PostgreSQL's backends serve both sides;
their CPU is given per request of both.
"""

from __future__ import annotations

import os
import secrets
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import cpu
from bench.corpus import CORPORA
from bench.load import (
    MIX,
    SEED_PER_AGENT,
    WARMUP,
    _ended_kind,
    _kind,
    _postmaster,
    answered,
    drive,
    ms_per,
    node_workers,
    seed,
    serving,
    summarise,
)

SIDES = ("off", "on")
ROUNDS = 2
# What the "on" server has that the "off" one has not: everything a service runs with, or one
# part of it (to tell their costs apart), or nothing (`same`: the pair's own noise floor).
PAIRS = {
    "observability": ("metrics", "access-log", "events"),
    "metrics": ("metrics",),
    "access-log": ("access-log",),
    "events": ("events",),
    "same": (),
}


def side_env(side: str, pair: str = "observability") -> dict[str, str | None]:
    """The environment that makes a server of `side` in `pair`: each part off (metrics: no
    token; the access log: `MEMORYHUB_ACCESS_LOG=0`, and LOG_LEVEL=WARNING as in every bench
    server; events: `MEMORYHUB_BENCH_NO_EVENTS=1`)
    unless it is this pair's and the side is "on"."""
    on = set(PAIRS[pair]) if side == "on" else set()
    return {
        "MEMORYHUB_METRICS_TOKEN": secrets.token_urlsafe(16) if "metrics" in on else None,
        # `serve` gives its processes <data dir>/metrics when the token is set.
        "PROMETHEUS_MULTIPROC_DIR": None,
        "MEMORYHUB_ACCESS_LOG": "1" if "access-log" in on else "0",
        # The access log is written at INFO (a bench server otherwise logs warnings only).
        "LOG_LEVEL": "INFO" if "access-log" in on else "WARNING",
        "MEMORYHUB_BENCH_NO_EVENTS": None if "events" in on else "1",
    }


def side_of(index: int, round_: int = 0) -> str:
    """The side client `index` drives in round `round_`: even-numbered clients drive "off" in the
    first round and "on" in the second (and so on), odd-numbered ones the other."""
    return SIDES[(index + round_) % 2]


def pair_workers(workers: int | None) -> int:
    """Web processes of each server: half what `serve` would run alone (at least one), so the
    two together run as many as one server would."""
    return node_workers(workers, len(SIDES))


def run_pair_bench(
    *,
    data_dir: Path,
    clients: int,
    duration: float,
    embedder: str,
    out,
    warmup: float = WARMUP,
    corpus: str = "synthetic",
    workers: int | None = None,
    pair: str = "observability",
) -> dict:
    """ROUNDS rounds of `duration` seconds; between them the two servers are started again in
    the other order and the clients change sides, so that neither the order of start nor the
    agents a side serves favours one side."""
    chosen = CORPORA[corpus]
    creds = seed(
        agents=clients, embedder_name=embedder, per_agent=SEED_PER_AGENT, out=out, corpus=chosen
    )
    envs = {side: side_env(side, pair) for side in SIDES}
    workers = pair_workers(workers)
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    spent: dict[str, float] = {}
    ratios: list[float | None] = []  # each round's on / off requests answered
    for round_ in range(ROUNDS):
        order = SIDES if round_ % 2 == 0 else SIDES[::-1]
        out(f"round {round_ + 1} of {ROUNDS}: {order[0]} started first")
        got, used = _round(
            data_dir,
            creds,
            envs,
            order=order,
            round_=round_,
            embedder=embedder,
            out=out,
            workers=workers,
            duration=duration,
            warmup=warmup,
            corpus=chosen,
        )
        sent = dict.fromkeys(SIDES, 0)
        for index, result in enumerate(got):
            results[side_of(index, round_)].append(result)
            sent[side_of(index, round_)] += answered([result])
        ratios.append(round(sent["on"] / sent["off"], 3) if sent["off"] else None)
        for kind, ms in used.items():
            spent[kind] = spent.get(kind, 0.0) + ms
    timed = duration * ROUNDS
    sides: dict[str, dict[str, Any]] = {}
    for side in SIDES:
        mine = results[side]
        sides[side] = {
            "clients": len(mine) // ROUNDS,
            "operations": summarise(mine, timed),
            "web_cpu_ms_per_request": ms_per(spent.get(f"{side} web", 0.0), answered(mine)),
            "on": list(PAIRS[pair]) if side == "on" else [],
            "env": _shown(envs[side]),
        }
    every = results["off"] + results["on"]
    postgres = sum(v for k, v in spent.items() if k.startswith("postgres"))
    rates = {side: sides[side]["operations"]["all"]["req_per_s"] for side in SIDES}
    off, on = rates["off"], rates["on"]
    web_off, web_on = (sides[s]["web_cpu_ms_per_request"] for s in SIDES)
    return {
        "pair": pair,
        "clients": clients,
        "duration_s": duration,
        "rounds": ROUNDS,
        "warmup_s": warmup,
        "embedder": embedder,
        "corpus": corpus,
        "workers": workers,
        "mix_percent": MIX,
        "seeded_memories": clients * SEED_PER_AGENT,
        "machine_load_avg": [round(x, 2) for x in os.getloadavg()],
        "sides": sides,
        "postgres_cpu_ms_per_request": ms_per(postgres, answered(every)),
        "on_over_off": {
            "throughput": round(on / off, 3) if off else None,
            "web_cpu": round(web_on / web_off, 3) if web_off and web_on else None,
            "throughput_by_round": ratios,
        },
    }


def _round(
    data_dir: Path,
    creds: list[dict],
    envs: dict[str, dict],
    *,
    order: tuple[str, ...],
    round_: int,
    embedder: str,
    out,
    workers: int,
    duration: float,
    warmup: float,
    corpus,
) -> tuple[list[dict], dict[str, float]]:
    """One round: both servers up (in `order`), every client against its side; returns the
    clients' results (in client order) and the CPU ms each kind of process spent."""
    with ExitStack() as stack:
        urls, roots = {}, {}
        for side in order:
            urls[side], pid = stack.enter_context(
                serving(
                    data_dir,
                    embedder=embedder,
                    out=out,
                    workers=workers,
                    env=envs[side],
                    name=f"serve-{side}",
                )
            )
            roots[side] = [pid]
        roots["postgres"] = _postmaster(data_dir)
        samples: dict = {}

        def started(client_pids: list[int]) -> None:
            time.sleep(warmup)  # the steady state's CPU, as load.run_load_bench
            samples["before"] = cpu.sample_kinds(roots, _side_kind)

        results, _ = drive(
            [urls[side_of(i, round_)] for i in range(len(creds))],
            creds,
            duration=duration,
            warmup=warmup,
            out=out,
            corpus=corpus,
            started=started,
        )
        after = cpu.sample_kinds(roots, _side_kind)
    return results, cpu.kinds_delta_ms(samples["before"], after, _ended_kind)


def _side_kind(root: str, pid: int, sample: cpu.ProcessCPU, root_pid: int) -> str | None:
    """load._kind, with a server's processes named after their side ("on web", "off serve")."""
    if root == "postgres":
        return _kind(root, pid, sample, root_pid)
    return f"{root} {_kind('serve', pid, sample, root_pid)}"


def _shown(env: dict[str, str | None]) -> dict[str, str | None]:
    """A side's environment as recorded with its figures (the token is not)."""
    return {k: "set" if k == "MEMORYHUB_METRICS_TOKEN" and v else v for k, v in env.items()}


def pair_table(result: dict, out) -> None:
    out("")
    out(
        f"paired mixed load: {result['clients']} clients split between two servers of "
        f"{result['workers']} web workers, {result['rounds']} rounds of {result['duration_s']:g}s, "
        "embedder "
        f"{result['embedder']}, corpus {result['corpus']} (load average after: "
        f"{result['machine_load_avg'][0]})"
    )
    on = ", ".join(result["sides"]["on"]["on"]) or "nothing (both sides alike)"
    out(f"off: no metrics, access log or events; on: {on}")
    out(
        f"{'side':<6}{'clients':>8}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}"
        f"{'errors':>8}{'web CPU ms/req':>16}"
    )
    for side, row in result["sides"].items():
        ops = row["operations"]["all"]
        web = row["web_cpu_ms_per_request"]
        out(
            f"{side:<6}{row['clients']:>8}{ops['req_per_s']:>9.1f}{ops['p50']:>9.2f}"
            f"{ops['p95']:>9.2f}{ops['p99']:>9.2f}{ops['errors']:>8}"
            f"{'-' if web is None else f'{web:.2f}':>16}"
        )
    ratio = result["on_over_off"]
    by_round = ", ".join(str(r) for r in ratio["throughput_by_round"])
    out(
        f"on / off: throughput {ratio['throughput']} (by round: {by_round}), web CPU per request "
        f"{ratio['web_cpu']}; "
        f"PostgreSQL (both sides) {result['postgres_cpu_ms_per_request']} ms per request"
    )
    out("")

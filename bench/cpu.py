"""On-CPU time of the processes a bench figure runs in, read from Linux's `/proc/.../schedstat`
(nanoseconds on a CPU, and waiting for one), so that a figure measured on a busy machine can be
told apart from the time the code itself needs: on a machine whose cores are all taken by
something else, a request's wall time is mostly its wait in the run queue.

Every function returns None where `/proc` does not say (not Linux, or no schedstat).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


def _schedstat(path: Path) -> tuple[int, int] | None:
    try:
        fields = path.read_text().split()
        return int(fields[0]), int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def thread_ns() -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) of the calling thread."""
    return _schedstat(Path(f"/proc/self/task/{threading.get_native_id()}/schedstat"))


def process_ns(pid: int) -> tuple[int, int] | None:
    """(on-CPU ns, run-queue wait ns) summed over the live threads of process `pid`."""
    tasks = Path(f"/proc/{pid}/task")
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    run = wait = 0
    seen = False
    for name in names:
        sample = _schedstat(tasks / name / "schedstat")
        if sample is not None:
            run, wait, seen = run + sample[0], wait + sample[1], True
    return (run, wait) if seen else None


def processes_ns(pids: list[int]) -> dict[int, tuple[int, int]]:
    """`process_ns` of each pid that can be read."""
    out = {}
    for pid in pids:
        sample = process_ns(pid)
        if sample is not None:
            out[pid] = sample
    return out


def delta_ms(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]):
    """(on-CPU ms, wait ms) spent between two `processes_ns` samples (a process first seen in
    `after` counts from its start)."""
    run = wait = 0
    for pid, (r, w) in after.items():
        r0, w0 = before.get(pid, (0, 0))
        run, wait = run + r - r0, wait + w - w0
    return run / 1e6, wait / 1e6


def descendants(pid: int) -> list[int]:
    """`pid` and every live process below it (read from /proc; [pid] where it cannot be)."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return [pid]
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            # The command name (2nd field) is in parentheses and may hold spaces.
            stat = Path(f"/proc/{entry}/stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, []))
    return out


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcessCPU:
    """One process's CPU from `/proc/PID/stat`, in ms: `own` (user + system of all its threads,
    those that ended included) and `reaped` (of its children that ended and were waited for:
    how the CPU of a PostgreSQL backend that closed its connection is still counted)."""

    ppid: int
    own: float
    reaped: float
    cmdline: str


def process_cpu(pid: int) -> ProcessCPU | None:
    """`ProcessCPU` of `pid`, None when it is gone or cannot be read."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        # The command name (2nd field) is in parentheses and may hold spaces.
        fields = stat.rsplit(")", 1)[1].split()
        ppid = int(fields[1])
        utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    except (OSError, ValueError, IndexError):
        return None
    tick_ms = 1000 / _CLOCK_TICKS
    return ProcessCPU(ppid, (utime + stime) * tick_ms, (cutime + cstime) * tick_ms, cmdline.strip())


def sample_kinds(roots: dict[str, list[int]], classify) -> dict[int, tuple[str, ProcessCPU]]:
    """Every live process below each root (`roots`: a name → root pids), with the kind
    `classify(root_name, pid, cpu, root_pid)` gives it (None: not counted)."""
    out: dict[int, tuple[str, ProcessCPU]] = {}
    for name, pids in roots.items():
        for root in pids:
            for pid in descendants(root):
                sample = process_cpu(pid)
                kind = None if sample is None else classify(name, pid, sample, root)
                if kind is not None:
                    out[pid] = (kind, sample)  # type: ignore[assignment]  # a sample: a kind
    return out


def kinds_delta_ms(
    before: dict[int, tuple[str, ProcessCPU]],
    after: dict[int, tuple[str, ProcessCPU]],
    ended_kind: Callable[[str], str] = lambda parent_kind: parent_kind,
) -> dict[str, float]:
    """CPU ms of each kind between two `sample_kinds`: what live processes spent (a process
    first seen in `after` from its start), and what children that ended in between spent (their
    parent's `reaped` grew by their whole life; what they had spent by `before` is taken off),
    counted to `ended_kind(the parent's kind)`."""
    spent: dict[str, float] = {}
    for pid, (kind, cpu) in after.items():
        start = before[pid][1].own if pid in before else 0.0
        spent[kind] = spent.get(kind, 0.0) + cpu.own - start
    for pid, (kind, cpu) in after.items():
        if pid not in before:
            continue
        grown = cpu.reaped - before[pid][1].reaped
        grown -= sum(c.own for p, (_, c) in before.items() if c.ppid == pid and p not in after)
        if grown:
            ended = ended_kind(kind)
            spent[ended] = spent.get(ended, 0.0) + grown
    return spent

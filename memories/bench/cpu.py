"""On-CPU time of the processes a bench figure runs in, read from Linux's `/proc/.../schedstat`
(nanoseconds on a CPU, and waiting for one), so that a figure measured on a busy machine can be
told apart from the time the code itself needs: on a machine whose cores are all taken by
something else, a request's wall time is mostly its wait in the run queue.

Every function returns None where `/proc` does not say (not Linux, or no schedstat).
"""

from __future__ import annotations

import os
import threading
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

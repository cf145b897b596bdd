"""`serve`'s supervisor: uvicorn, the django-q2 cluster and the embedded PostgreSQL, kept up.

`supervise` (what `python manage.py serve` runs) starts the web server and the cluster as
children, each in a process group of its own, and watches them every `TICK`:

- a child that dies (killed, crashed, failed to start) is restarted, after a back-off that
  doubles with each failure in a row (`BACKOFF_FIRST` … `BACKOFF_MAX`; a child that ran for
  `STABLE_AFTER` seconds starts over); whatever the dead child left in its group (uvicorn's
  worker processes, the cluster's workers) is killed first. The web server exiting by itself
  with status 0 means it was told to stop: `serve` stops too.
- when the database is the embedded PostgreSQL (no DATABASE_URL), a dead postmaster is started
  again at once; PostgreSQL replays its WAL, so nothing committed is lost. Meanwhile the web
  processes answer 503 (memoryhub/db_outage.py) and recover by themselves.
- SIGTERM or SIGINT (Ctrl-C) stops the children: SIGTERM to each, then SIGKILL to what is left
  of its group after `STOP_TIMEOUT` seconds. The database is left running, as by every other
  command (`make stop-db` stops it).

Once the web server answers HTTP, `serve` prints one line, `MemoryHub ready on <url>` with the
console, API, MCP (and, with MEMORYHUB_METRICS_TOKEN, metrics) URLs; scripts may wait for it.
With MEMORYHUB_METRICS_TOKEN set, every child shares one PROMETHEUS_MULTIPROC_DIR (the
variable's value, else `<data dir>/metrics`), emptied at start; the files of a process that has
died are marked (`mark_process_dead`: its live gauges drop out, its counts stay in the sums).

`available_cores` is the one count of the cores this process may use (the CPU quota of its
cgroup applied): the web processes' default number, the embedder's idle threads and the
bench all size themselves by it.
"""

from __future__ import annotations

import http.client
import logging
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from django.conf import settings
from prometheus_client import multiprocess

from memoryhub import embedded_db

logger = logging.getLogger("memoryhub.serve")

TICK = 0.1  # seconds between looks at the children and the database
BACKOFF_FIRST = 0.5  # seconds before restarting a child that died
BACKOFF_MAX = 30.0
STABLE_AFTER = 30.0  # a child that ran this long is healthy again: its back-off starts over
STOP_TIMEOUT = 10.0  # seconds a child gets to stop after SIGTERM


CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def available_cores() -> int:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup's CPU quota
    (a container allowed 2 CPUs of a 64-core host has 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    try:
        quota, period = CGROUP_CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def default_workers() -> int:
    """`WEB_CONCURRENCY` when set, else one web process per core it may use: a Python process runs
    one thread at a time. (No fixed cap: on 16 cores 8 and 14 workers served more than 4 did,
    docs/performance.md#code-figures; each process's share of PostgreSQL's connections is sized by
    the count, `memoryhub.settings`, docs/performance.md.)"""
    configured = os.environ.get("WEB_CONCURRENCY", "").strip()
    if configured:
        return int(configured)
    return available_cores()


def processes(*, host: str, port: int, workers: int, cluster: bool = True) -> list[list[str]]:
    """The commands `serve` starts, the web server last: the django-q2 cluster (unless
    `cluster` is false) and uvicorn serving the ASGI app.

    uvicorn's own proxy-header handling is off, whatever MEMORYHUB_TRUSTED_PROXIES says: on by
    default, it believes X-Forwarded-For and X-Forwarded-Proto from 127.0.0.1 (or from
    FORWARDED_ALLOW_IPS) and rewrites the request's client before the app sees the real peer,
    so any local process, or a proxy we were not told about, would choose the address that
    sign-in lockouts count. The app applies the one trusted-proxy rule itself
    (memoryhub/proxies.py), to Django's requests and /mcp alike, and strips an untrusted
    peer's forwarded headers; two layers each rewriting the client could only disagree."""
    commands = [[sys.executable, "manage.py", "qcluster"]] if cluster else []
    commands.append(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "memoryhub.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
            "--no-proxy-headers",
            "--log-level",
            "warning",
        ]
    )
    return commands


def _describe(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


class Child:
    """One supervised process (and its process group)."""

    def __init__(self, name: str, command: list[str], env: dict[str, str]):
        self.name, self.command, self.env = name, command, env
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0
        self.failures = 0  # deaths in a row, each before STABLE_AFTER
        self.restart_at: float | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(self.command, env=self.env, start_new_session=True)
        self.started_at = time.monotonic()
        self.restart_at = None

    @property
    def running(self) -> bool:
        return self.process is not None

    def died(self, code: int) -> None:
        """Clean up after the process ended on its own, and schedule its restart."""
        lived = time.monotonic() - self.started_at
        self._kill_group()
        self.process = None
        self.failures = 1 if lived >= STABLE_AFTER else self.failures + 1
        delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self.failures - 1))
        self.restart_at = time.monotonic() + delay
        logger.error(
            "%s died (%s) after %.1f s; restarting it in %.1f s",
            self.name,
            _describe(code),
            lived,
            delay,
        )

    def check(self) -> None:
        """Notice a death; restart when the back-off is over."""
        if self.process is not None:
            code = self.process.poll()
            if code is not None:
                self.died(code)
        elif self.restart_at is not None and time.monotonic() >= self.restart_at:
            self.start()
            logger.warning("%s restarted (pid %s)", self.name, self.process.pid)  # type: ignore[attr-defined]

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> None:
        if self.process is None:
            return
        try:
            code = self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            logger.error("%s did not stop within %.0f s: killing it", self.name, STOP_TIMEOUT)
            self._kill_group()
            self.process.wait()
        else:
            if code != 0:
                self._kill_group()  # died rather than stopped: its children may be left
        self.process = None

    def _kill_group(self) -> None:
        """SIGKILL what is left in the process's group (started with a session of its own)."""
        pgid = getattr(self.process, "pid", None)
        if pgid is None:
            return
        with suppress(ProcessLookupError, PermissionError):  # nothing left in the group
            os.killpg(pgid, signal.SIGKILL)


class EmbeddedDatabase:
    """Restarts the embedded PostgreSQL of `data_dir` when its postmaster is gone."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.retry_at = 0.0
        self.failures = 0

    def check(self) -> None:
        pgdata = self.data_dir / "pg"
        if embedded_db.running_info(pgdata) is not None or time.monotonic() < self.retry_at:
            return
        began = time.monotonic()
        logger.error("embedded PostgreSQL in %s is down: restarting it", pgdata)
        try:
            embedded_db.ensure_server(self.data_dir)
        except Exception:  # noqa: BLE001 - keep serving, and try again
            self.failures += 1
            delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (self.failures - 1))
            self.retry_at = time.monotonic() + delay
            logger.exception("embedded PostgreSQL did not start; trying again in %.1f s", delay)
            return
        self.failures = 0
        logger.warning("embedded PostgreSQL restarted in %.1f s", time.monotonic() - began)


READY_POLL = 0.2  # seconds between two asks whether the web server answers
REAP_EVERY = 5.0  # seconds between two looks for dead processes' metrics files
_PID_FILE = re.compile(r"_(\d+)\.db$")


def metrics_dir(env: dict[str, str]) -> Path | None:
    """With MEMORYHUB_METRICS_TOKEN: the children's PROMETHEUS_MULTIPROC_DIR, emptied (what a
    previous run left would be counted again)."""
    if not settings.MEMORYHUB_METRICS_TOKEN:
        return None
    path = Path(env.get("PROMETHEUS_MULTIPROC_DIR") or settings.DATA_DIR / "metrics")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)
    env["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def mark_dead_processes(path: Path, marked: set[int]) -> None:
    """Mark the metrics files of processes that are gone (a restarted uvicorn worker, a recycled
    cluster worker): prometheus-client then leaves their live gauges out of a scrape."""
    for file in path.glob("*.db"):
        match = _PID_FILE.search(file.name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid not in marked and not _alive(pid):
            multiprocess.mark_process_dead(pid, str(path))
            marked.add(pid)


def ready_line(host: str, port: int) -> str:
    base = f"http://{host}:{port}"
    parts = [f"console {base}/console/", f"API {base}/api/v1/", f"MCP {base}/mcp"]
    if settings.MEMORYHUB_METRICS_TOKEN:
        parts.append(f"metrics {base}/metrics")
    return f"MemoryHub ready on {base}: " + ", ".join(parts) + ". Ctrl-C stops."


def answers_http(host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether the web server answers a request (any status: a 503 while the database starts
    is an answer)."""
    probe = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    connection = http.client.HTTPConnection(probe, port, timeout=timeout)
    try:
        connection.request("GET", "/healthz", headers={"Host": "localhost"})
        connection.getresponse().read()
    except OSError:
        return False
    finally:
        connection.close()
    return True


def supervise(
    *, host: str, port: int, workers: int, cluster: bool, out: Callable[[str], None]
) -> None:
    """Start the children (`processes`) and keep them, and the embedded PostgreSQL, running
    until SIGTERM or SIGINT, or until the web server stops by itself; then stop them. `out`
    gets the ready line once the web server answers."""
    # The web processes size their share of PostgreSQL's connections by their number.
    env = dict(os.environ, WEB_CONCURRENCY=str(workers))
    metrics_path = metrics_dir(env)
    commands = processes(host=host, port=port, workers=workers, cluster=cluster)
    children = [
        Child("web server" if command is commands[-1] else "django-q2 cluster", command, env)
        for command in commands
    ]
    web = children[-1]
    database = EmbeddedDatabase(settings.EMBEDDED_DB.data_dir) if settings.EMBEDDED_DB else None
    if database is not None:
        # Up before the children, which would each wait to start it, and before the watch,
        # which would take a server not started yet for one that died.
        embedded_db.ensure_started(settings.DATABASES["default"])
    stop = threading.Event()

    def request_stop(*_):
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    for child in children:
        child.start()
    threading.Thread(target=_announce_ready, args=(host, port, stop, out), daemon=True).start()
    marked: set[int] = set()
    reaped_at = time.monotonic()
    try:
        while not stop.is_set():
            if metrics_path is not None and time.monotonic() - reaped_at >= REAP_EVERY:
                mark_dead_processes(metrics_path, marked)
                reaped_at = time.monotonic()
            # The pause between rounds is a wait on the web server, so its exit is seen
            # at once.
            if web.running:
                try:
                    code = web.process.wait(timeout=TICK)  # type: ignore[union-attr]  # running
                except subprocess.TimeoutExpired:
                    pass
                else:
                    if code == 0:
                        logger.warning("the web server stopped: stopping")
                        break
                    web.died(code)
            else:
                stop.wait(TICK)
            if database is not None:
                database.check()
            for child in children:
                child.check()
    except KeyboardInterrupt:
        pass
    finally:
        for child in reversed(children):  # the web server first: no new requests
            child.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for child in reversed(children):
            child.wait_stopped(deadline)


def _announce_ready(
    host: str, port: int, stop: threading.Event, out: Callable[[str], None]
) -> None:
    """Write the ready line once, when the web server first answers."""
    while not stop.is_set():
        if answers_http(host, port):
            out(ready_line(host, port))
            return
        stop.wait(READY_POLL)

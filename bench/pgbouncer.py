"""PgBouncer in transaction mode in front of the bench's throwaway PostgreSQL (`bench --load
--pgbouncer`): Debian's `pgbouncer` (`apt-get install pgbouncer`), which the bench starts on a
free 127.0.0.1 port and stops at the end. The nodes reach the database through it with
`MEMORYHUB_DB_POOL_MODE=transaction`, as docs/operations.md#behind-a-connection-pooler says a
deployment behind such a pooler does."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg

from memoryhub.throwaway import free_port

# Where Debian puts it (/usr/sbin is not on every user's PATH).
SEARCH = ("/usr/local/sbin", "/usr/sbin", "/sbin")
# Server connections per database and user: PgBouncer's own default.
POOL_SIZE = 20
# The throwaway PostgreSQL runs as this system user when the bench runs as root
# (memoryhub/embedded_db.py); PgBouncer refuses to run as root, so it runs as that user too.
ROOT_RUNS_AS = "embedded_postgres"
MISSING = (
    "--pgbouncer needs PgBouncer, which is not installed "
    "(Debian/Ubuntu: apt-get install pgbouncer; it is looked for on PATH and in /usr/sbin)"
)


def find_pgbouncer(path: str | None = None) -> str | None:
    """The `pgbouncer` executable on `path` (default: PATH, then `SEARCH`), None without one."""
    if path is None:
        path = os.pathsep.join([os.environ.get("PATH", ""), *SEARCH])
    return shutil.which("pgbouncer", path=path)


def config(
    *, port: int, host: str, server_port: str | int, user: str, dbname: str, auth_file: Path
) -> str:
    """pgbouncer.ini: 127.0.0.1:`port` in transaction mode, `dbname` forwarded to the server at
    `host` (a socket directory or a host name) and `server_port`, trusting local clients."""
    return "\n".join(
        [
            "[databases]",
            f"{dbname} = host={host} port={server_port} dbname={dbname} user={user}",
            "",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {auth_file}",
            "pool_mode = transaction",
            f"default_pool_size = {POOL_SIZE}",
            "max_client_conn = 1000",
            "ignore_startup_parameters = extra_float_digits",
            "log_connections = 0",
            "log_disconnections = 0",
            "",
        ]
    )


@contextmanager
def running(database: Mapping, *, out, timeout: float = 30.0) -> Iterator[tuple[str, int]]:
    """PgBouncer in front of `database` (Django's settings of the throwaway server); yields the
    database URL through it and its pid."""
    binary = find_pgbouncer()
    if binary is None:
        raise RuntimeError(MISSING)
    directory = Path(tempfile.mkdtemp(prefix="memoryhub-pgbouncer-"))
    directory.chmod(0o755)  # readable by the user it runs as
    port = free_port()
    user, dbname = database["USER"], database["NAME"]
    auth_file = directory / "users.txt"
    auth_file.write_text(f'"{user}" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        config(
            port=port,
            host=database["HOST"],
            server_port=database["PORT"],
            user=user,
            dbname=dbname,
            auth_file=auth_file,
        )
    )
    for path in (auth_file, ini):
        path.chmod(0o644)
    log_path = directory / "pgbouncer.log"
    run_as = ROOT_RUNS_AS if os.geteuid() == 0 else None
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [binary, str(ini)],
            stdout=log,
            stderr=subprocess.STDOUT,
            user=run_as,
            start_new_session=True,
        )
    url = f"postgres://{user}@127.0.0.1:{port}/{dbname}"
    try:
        deadline = time.monotonic() + timeout
        while not _answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PgBouncer did not come up:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        out(f"PgBouncer {port} (transaction mode, {POOL_SIZE} server connections) in front")
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False

"""A real PgBouncer in transaction mode in front of the test database, for the tests of
`MEMORYHUB_DB_POOL_MODE=transaction` (docs/operations.md#behind-a-connection-pooler).

`pgbouncer_port` (module-scoped) starts Debian's `pgbouncer` on a free loopback port, in
transaction mode with one server connection (every client takes turns on it) which is reset
(`DISCARD ALL`) after each transaction: what a session holds between transactions (a session
advisory lock, a `SET`, a held cursor, a LISTEN) is gone, as it may be on any busy pooler. The
tests skip when `pgbouncer` is not installed.

`through_pgbouncer` sends this process's connections (the test's, its threads', an in-process
server's) through it, with the settings transaction mode gives: no startup options, no
prepared statements.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from django.db import connection, connections

from memoryhub.embedded_db import DB_USER
from memoryhub.throwaway import free_port
from tests.support.components import component_path, wait_accepting


@pytest.fixture(scope="module")
def pgbouncer_port(django_db_setup, django_db_blocker):
    binary = component_path("pgbouncer")
    with django_db_blocker.unblock():
        server = dict(connection.settings_dict)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="pgbouncer-") as folder:
        workdir = Path(folder)
        users = workdir / "users.txt"
        users.write_text(f'"{DB_USER}" ""\n')
        ini = workdir / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={server['HOST'] or '127.0.0.1'} port={server['PORT'] or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\n"
            "pool_mode = transaction\ndefault_pool_size = 1\nmax_client_conn = 200\n"
            # The worst a pooler does to session state, every time: a client's session locks,
            # SETs, held cursors and LISTENs are gone once its transaction ends.
            "server_reset_query = DISCARD ALL\nserver_reset_query_always = 1\n"
            "server_check_delay = 0\nquery_wait_timeout = 60\n"
        )
        with running_pgbouncer(binary, ini, port):
            yield port


@contextlib.contextmanager
def running_pgbouncer(binary: str, ini: Path, port: int) -> Iterator[None]:
    """`pgbouncer` on `ini` (listening on `port`) until the block ends. Its folder and files
    are made readable to the user it runs as."""
    ini.parent.chmod(0o755)
    for path in ini.parent.iterdir():
        path.chmod(0o644)
    # PgBouncer refuses to run as root: as the embedded server's own user then.
    as_user = ["-u", "embedded_postgres"] if os.geteuid() == 0 else []
    process = subprocess.Popen(
        [binary, *as_user, str(ini)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        wait_accepting(process, port, "pgbouncer")
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture
def through_pgbouncer(pgbouncer_port, transactional_db, settings, monkeypatch):
    """Every connection of this process goes through PgBouncer in transaction mode, as
    `MEMORYHUB_DB_POOL_MODE=transaction` sets them up, until the test ends."""
    settings.MEMORYHUB_DB_POOL_MODE = "transaction"
    settings.MEMORYHUB_DB_SESSION_SETTINGS = False
    direct = dict(connection.settings_dict)
    shared = connection.settings_dict  # every thread's connection reads this same dict
    options = {
        name: value
        for name, value in shared["OPTIONS"].items()
        if name not in ("options", "prepare_threshold", "server_side_binding")
    }
    # Other threads' connections (a served app's) end too: they reconnect, through PgBouncer.
    # Each is waited for (the timeout argument), so that none of PgBouncer's server connections
    # still answers its check query when the next test's first query reaches it.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid, 30000) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    connections.close_all()
    monkeypatch.setitem(shared, "HOST", "127.0.0.1")
    monkeypatch.setitem(shared, "PORT", str(pgbouncer_port))
    monkeypatch.setitem(shared, "OPTIONS", options)
    yield direct
    connections.close_all()


def direct_url(direct: dict) -> str:
    """A URL straight to the test database (what `MEMORYHUB_DIRECT_DATABASE_URL` names)."""
    return (
        f"postgresql://{direct['USER']}@/{direct['NAME']}"
        f"?host={direct['HOST']}&port={direct['PORT']}"
    )


def direct_query(direct: dict, sql: str, params=()) -> list[tuple]:
    """`sql` on a connection of its own straight to the test database (not through PgBouncer)."""
    with psycopg.connect(direct_url(direct), autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()

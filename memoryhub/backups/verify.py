"""Checking an archive without restoring it: its manifest, its sha256, and `pg_restore --list`
reading it whole (a truncated or corrupted archive fails here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import memoryhub.backups.manifest as manifests
from memoryhub.backups.tools import (
    BackupError,
    PgTools,
    Progress,
    connect,
    find_tools,
    run_client,
    server_major,
    sha256_of,
)


@dataclass(frozen=True)
class VerifiedBackup:
    dump_path: Path
    manifest: dict[str, Any] = field(repr=False)
    entries: int  # of the archive's table of contents
    tools: PgTools


def _table_data(listing: str) -> set[str]:
    """The tables whose rows the archive holds, from `pg_restore --list`: lines such as
    `4321; 0 16385 TABLE DATA public memories_memory postgres`."""
    found = set()
    for line in listing.splitlines():
        if line.startswith(";") or " TABLE DATA " not in line:
            continue
        schema, table = line.split(" TABLE DATA ", 1)[1].split()[:2]
        found.add(manifests.table_label(schema, table))
    return found


def verify_backup(dump_path: str | Path, *, progress: Progress = None) -> VerifiedBackup:
    """Check `dump_path` against its manifest with the pg_restore that fits the database the
    settings name (whose major version must be at least the archive's). Raises BackupError."""
    say = progress or (lambda line: None)
    dump_path = Path(dump_path).expanduser().resolve()
    manifest = manifests.read_manifest(manifests.manifest_path_for(dump_path))
    if not dump_path.is_file():
        raise BackupError(f"{dump_path} does not exist")
    say("checking the archive's sha256")
    expected = manifest["dump"]["sha256"]
    actual = sha256_of(dump_path)
    if actual != expected:
        raise BackupError(
            f"{dump_path} is damaged: its sha256 is {actual}, the manifest says {expected} "
            f"({dump_path.stat().st_size} bytes, the manifest says {manifest['dump']['bytes']})"
        )
    with connect() as conn:
        major = server_major(conn)
    dumped_major = manifest["server"]["postgresql_major"]
    if major < dumped_major:
        raise BackupError(
            f"the archive is of PostgreSQL {dumped_major}; this server is PostgreSQL {major}, "
            "older: restore it into a server of the same or a newer major version"
        )
    tools = find_tools(major)
    say(f"reading the archive's table of contents with {tools.pg_restore}")
    listing = run_client([tools.pg_restore, "--list", str(dump_path)])
    entries = [line for line in listing.splitlines() if line and not line.startswith(";")]
    missing = set(manifest["tables"]) - _table_data(listing)
    if missing:
        raise BackupError(f"{dump_path} lacks the rows of {', '.join(sorted(missing))}")
    return VerifiedBackup(dump_path=dump_path, manifest=manifest, entries=len(entries), tools=tools)

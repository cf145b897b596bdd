"""`restore_backup`: an archive into the database the settings name, checked before and after.

Before anything is touched: the manifest is there, the archive's sha256 is the manifest's,
`pg_restore --list` reads it whole, the running SECRET_KEY and API-key hashing are the backup's
(fingerprints), the code knows every migration the archive has applied, and the target holds
no table (or `force` says to drop what is there). Then `pg_restore` in one transaction (a
failure leaves the target as it was after the drop), a forward migration when the archive is
older than the code, and the checks of `memoryhub.backups.restore_checks`, each a line of the report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.core.management import call_command
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.loader import MigrationLoader
from psycopg import sql

import memoryhub.backups.manifest as manifests
import memoryhub.backups.restore_checks as checks
from memoryhub.backups.tools import (
    BackupError,
    Progress,
    client_command,
    connect,
    connection_params,
    run_client,
    table_progress,
)
from memoryhub.backups.verify import verify_backup

# How long dropping a non-empty target waits for another session's locks before giving up.
LOCK_TIMEOUT = "30s"


@dataclass
class RestoreReport:
    dump_path: Path
    manifest: dict[str, Any] = field(repr=False)
    checks: list[checks.Check] = field(default_factory=list)
    migrated: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


def unknown_migrations(manifest: dict[str, Any]) -> list[str]:
    """Migrations the archive has applied that this code does not have (a newer archive)."""
    loader = MigrationLoader(None, ignore_no_migrations=True)
    known = set(loader.disk_migrations)
    for migration in loader.disk_migrations.values():
        known.update(migration.replaces or ())
    return [
        f"{app}.{name}"
        for app, names in sorted(manifest["migrations"].items())
        if app in loader.migrated_apps
        for name in names
        if (app, name) not in known
    ]


def _disconnect() -> None:
    """Django's connections (and pool) of this process let go of the target."""
    for connection in connections.all():
        connection.close()
        if hasattr(connection, "close_pool"):
            connection.close_pool()


def _drop_everything(conn: psycopg.Connection, tables: list[tuple[str, str]]) -> None:
    schemas = sorted({schema for schema, _ in tables} | {"public"})
    with conn.transaction():
        conn.execute(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        for schema in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute("CREATE SCHEMA public")


def _pending_migrations() -> list[str]:
    executor = MigrationExecutor(connections["default"])
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{m.app_label}.{m.name}" for m, backwards in plan if not backwards]


def restore_backup(
    dump_path: str | Path, *, force: bool = False, progress: Progress = None
) -> RestoreReport:
    """Restore `dump_path` into the database the settings name. Refuses (BackupError, target
    untouched) a damaged archive, a wrong key, a newer schema, or a non-empty target without
    `force`. Returns the report of the checks made after the restore: `report.ok` is False
    if any failed."""
    started = time.monotonic()
    say = progress or (lambda line: None)
    verified = verify_backup(dump_path, progress=progress)
    manifest = verified.manifest
    report = RestoreReport(dump_path=verified.dump_path, manifest=manifest)
    report.checks.append(
        checks.Check(
            "archive",
            True,
            f"sha256 matches the manifest; pg_restore reads its {verified.entries} entries",
        )
    )
    keys = checks.keys_match(manifest)
    if not keys.ok:
        raise BackupError(f"{keys.detail} Nothing was changed.")
    report.checks.append(keys)
    newer = unknown_migrations(manifest)
    if newer:
        raise BackupError(
            f"the backup has migrations this version lacks ({', '.join(newer[:5])}): restore "
            "it with the version it was made by, or a newer one. Nothing was changed."
        )
    params = connection_params()
    _disconnect()
    with connect() as conn:
        present = manifests.user_tables(conn)
        if present and not force:
            names = ", ".join(manifests.table_label(*t) for t in present[:5])
            raise BackupError(
                f"the target database is not empty ({len(present)} tables: {names}, ...): "
                "restore into an empty database, or pass --force to drop what is there. "
                "Nothing was changed."
            )
        if present:
            say(f"dropping the {len(present)} tables there")
            _drop_everything(conn, present)
    conninfo, env = client_command(params)
    say(f"restoring with {verified.tools.pg_restore} ({verified.tools.version})")
    run_client(
        [
            verified.tools.pg_restore,
            "--single-transaction",
            "--exit-on-error",
            "--no-owner",
            "--no-privileges",
            "--verbose",
            "--no-password",
            f"--dbname={conninfo}",
            str(verified.dump_path),
        ],
        env,
        table_progress(say, "restoring", len(manifest["tables"])),
    )
    with connect() as conn:
        report.checks.append(checks.rows_match(manifest["tables"], manifests.row_counts(conn)))
    report.migrated = _pending_migrations()
    if report.migrated:
        say(f"migrating forward: {len(report.migrated)} migrations")
        call_command("migrate", interactive=False, verbosity=0)
        _disconnect()
    with connect() as conn:
        if report.migrated:
            after = manifests.row_counts(conn)
            changed = sorted(t for t in after if after[t] != manifest["tables"].get(t))
            report.checks.append(
                checks.Check(
                    "migrations",
                    True,
                    f"migrated forward by {len(report.migrated)} "
                    f"({', '.join(report.migrated)}); tables they changed: "
                    f"{', '.join(changed) or 'none'}",
                )
            )
        else:
            report.checks.append(checks.Check("migrations", True, "none to apply"))
        report.checks.append(checks.sequences_ahead(conn))
        report.checks.append(checks.counters_ahead(conn))
        report.checks.append(checks.api_keys_authenticate(conn, manifest))
        report.checks.append(checks.webhook_secrets_decrypt(conn))
    report.seconds = time.monotonic() - started
    return report

"""A backup's manifest: what the archive holds, read in the snapshot it was dumped from.

The row counts, migrations and versions are read in the REPEATABLE READ transaction whose
snapshot `pg_dump --snapshot` dumps, so they describe the archive exactly, whatever writers do
meanwhile. The keys section holds fingerprints, never a key: a restore compares them with the
running settings' before it touches anything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from accounts.keys import hash_key
from memories.webhooks.signing import key_fingerprint
from memoryhub.backups.tools import BackupError, scalar

FORMAT = "memoryhub-backup/1"
DUMP_SUFFIX = ".dump"
MANIFEST_SUFFIX = ".manifest.json"
# Hashed with the running code's API-key hash: the same digest means keys made before the
# backup still authenticate after the restore.
API_KEY_CHECK = "mh_backup-manifest-hash-check"


def manifest_path_for(dump_path: Path) -> Path:
    name = dump_path.name
    stem = name[: -len(DUMP_SUFFIX)] if name.endswith(DUMP_SUFFIX) else name
    return dump_path.with_name(stem + MANIFEST_SUFFIX)


def keys_section() -> dict[str, Any]:
    """Fingerprints of the keys that protect stored data, as the running settings have them."""
    return {
        # Webhook secrets are encrypted with a key derived from SECRET_KEY.
        "secret_key_fingerprint": key_fingerprint(),
        # API keys are stored as an unkeyed SHA-256 (accounts/keys.py): no pepper to lose.
        "api_key_hash": "sha256",
        "api_key_hash_check": hash_key(API_KEY_CHECK),
    }


def user_tables(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """(schema, table) of every ordinary table outside PostgreSQL's own schemas."""
    return conn.execute(
        """
        SELECT n.nspname, c.relname FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%'
          AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass
                          AND d.objid = c.oid AND d.deptype = 'e')
        ORDER BY 1, 2
        """
    ).fetchall()


def table_label(schema: str, table: str) -> str:
    return table if schema == "public" else f"{schema}.{table}"


def row_counts(conn: psycopg.Connection) -> dict[str, int]:
    counts = {}
    for schema, table in user_tables(conn):
        query = sql.SQL("SELECT count(*) FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(table)
        )
        counts[table_label(schema, table)] = scalar(conn, query)
    return counts


def applied_migrations(conn: psycopg.Connection) -> dict[str, list[str]]:
    if scalar(conn, "SELECT to_regclass('public.django_migrations')") is None:
        return {}
    applied: dict[str, list[str]] = {}
    for app, name in conn.execute("SELECT app, name FROM django_migrations ORDER BY app, id"):
        applied.setdefault(app, []).append(name)
    return applied


def server_versions(conn: psycopg.Connection) -> dict[str, Any]:
    vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {
        "postgresql": scalar(conn, "SHOW server_version"),
        "postgresql_major": int(scalar(conn, "SHOW server_version_num")) // 10000,
        "pgvector": vector[0] if vector else None,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Written whole or not at all (a temporary file renamed)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(partial, path)


def read_manifest(path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BackupError(f"no manifest beside the dump: {path} is missing") from None
    except (OSError, ValueError) as exc:
        raise BackupError(f"the manifest {path} cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{path} is not a MemoryHub backup manifest ({FORMAT})")
    return manifest

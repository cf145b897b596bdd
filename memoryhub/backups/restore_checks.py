"""What a restore verifies once the archive is in, each check a line of the report: the rows
against the manifest, every sequence and counter ahead of the values in use, API keys hashed
as the running code hashes them, webhook secrets readable with the running SECRET_KEY."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

import memoryhub.backups.manifest as manifests
from accounts.keys import KEY_PREFIX, LOOKUP_LEN
from accounts.models import ApiKey
from memories.models import (
    POSITION_SEQUENCE,
    Event,
    Memory,
    MemoryRevision,
    Message,
    Thread,
    WebhookEndpoint,
)
from memories.webhooks import signing
from memoryhub.backups.tools import scalar

# Sequences no column owns, and the column whose values they hand out.
UNOWNED_SEQUENCES = {POSITION_SEQUENCE: (Event._meta.db_table, "position")}
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def keys_match(manifest: dict[str, Any]) -> Check:
    """The running settings' key fingerprints against the backup's."""
    recorded, running = manifest["keys"], manifests.keys_section()
    if recorded["secret_key_fingerprint"] != running["secret_key_fingerprint"]:
        return Check(
            "keys",
            False,
            "the backup was made with another SECRET_KEY (fingerprint "
            f"{recorded['secret_key_fingerprint']}, this instance's is "
            f"{running['secret_key_fingerprint']}): its webhook secrets would not decrypt. "
            "Restore with the SECRET_KEY the backup was made with.",
        )
    if recorded["api_key_hash_check"] != running["api_key_hash_check"]:
        return Check(
            "keys",
            False,
            f"the backup's API keys were hashed as {recorded['api_key_hash']}, which this "
            "version does not: its API keys would not authenticate",
        )
    return Check("keys", True, "SECRET_KEY fingerprint and API-key hashing match the backup's")


def rows_match(expected: dict[str, int], actual: dict[str, int]) -> Check:
    wrong = {t: (n, actual.get(t)) for t, n in expected.items() if actual.get(t) != n}
    extra = sorted(set(actual) - set(expected))
    if wrong or extra:
        parts = [f"{t}: {got} rows, manifest {want}" for t, (want, got) in sorted(wrong.items())]
        parts += [f"{t}: not in the manifest" for t in extra]
        return Check("rows", False, "; ".join(parts))
    return Check(
        "rows", True, f"{len(expected)} tables, {sum(expected.values())} rows as the manifest says"
    )


def _max(conn: psycopg.Connection, schema: str, table: str, column: str) -> int | None:
    query = sql.SQL("SELECT max({}) FROM {}.{}").format(
        sql.Identifier(column), sql.Identifier(schema), sql.Identifier(table)
    )
    return scalar(conn, query)


def sequences_ahead(conn: psycopg.Connection) -> Check:
    """Each sequence's next value is above the highest value in use in its column."""
    rows = conn.execute(
        """
        SELECT s.schemaname, s.sequencename, s.last_value, s.start_value, tn.nspname, t.relname,
               a.attname
        FROM pg_sequences s
        JOIN pg_namespace sn ON sn.nspname = s.schemaname
        JOIN pg_class sc ON sc.relnamespace = sn.oid AND sc.relname = s.sequencename
        LEFT JOIN pg_depend d ON d.classid = 'pg_class'::regclass AND d.objid = sc.oid
             AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
        LEFT JOIN pg_class t ON t.oid = d.refobjid
        LEFT JOIN pg_namespace tn ON tn.oid = t.relnamespace
        LEFT JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
        ORDER BY 1, 2
        """
    ).fetchall()
    behind, unchecked, checked = [], [], 0
    for schema, name, last, start, table_schema, table, column in rows:
        if table is None and name in UNOWNED_SEQUENCES:
            table_schema, (table, column) = schema, UNOWNED_SEQUENCES[name]
        if table is None:
            unchecked.append(name)
            continue
        highest = _max(conn, table_schema, table, column)
        given = last if last is not None else start - 1
        checked += 1
        if highest is not None and given < highest:
            behind.append(f"{name} would hand out {given + 1}, {table}.{column} holds {highest}")
    if behind:
        return Check("sequences", False, "; ".join(behind))
    detail = f"{checked} sequences above the highest value in use"
    if unchecked:
        detail += f" ({', '.join(unchecked)}: no column to compare with)"
    return Check("sequences", True, detail)


def counters_ahead(conn: psycopg.Connection) -> Check:
    """The counters the application keeps in rows: a memory's version is at least each of its
    revisions', a thread's last message number at least each of its messages', and every
    webhook's cursor within the event positions handed out."""
    memory, revision = Memory._meta.db_table, MemoryRevision._meta.db_table
    thread, message = Thread._meta.db_table, Message._meta.db_table
    webhook = WebhookEndpoint._meta.db_table
    queries = {
        "revisions above their memory's version": f"""
            SELECT count(*) FROM {revision} r JOIN {memory} m ON m.id = r.memory_id
            WHERE r.version > m.version""",
        "messages above their thread's last number": f"""
            SELECT count(*) FROM {message} x JOIN {thread} t ON t.id = x.thread_id
            WHERE x.seq > t.last_seq""",
        "webhook cursors past the event positions handed out": f"""
            SELECT count(*) FROM {webhook}, (SELECT last_value, is_called FROM {POSITION_SEQUENCE}) s
            WHERE cursor > CASE WHEN s.is_called THEN s.last_value ELSE 0 END""",
    }
    wrong = []
    for what, query in queries.items():
        count = scalar(conn, query)
        if count:
            wrong.append(f"{count} {what}")
    if wrong:
        return Check("counters", False, "; ".join(wrong))
    return Check(
        "counters", True, "memory versions, thread message numbers and webhook cursors consistent"
    )


def api_keys_authenticate(conn: psycopg.Connection, manifest: dict[str, Any]) -> Check:
    """Keys are proven by their stored hash: each row holds a hash of the running code's form
    and a lookup prefix of the key format, and the code hashes as the backup's did."""
    running = manifests.keys_section()["api_key_hash_check"]
    if manifest["keys"]["api_key_hash_check"] != running:
        return Check("api keys", False, "this version hashes API keys otherwise than the backup's")
    rows = conn.execute(f"SELECT prefix, key_hash FROM {ApiKey._meta.db_table}").fetchall()
    bad = [
        prefix
        for prefix, key_hash in rows
        if not _HEX64.fullmatch(key_hash)
        or not prefix.startswith(KEY_PREFIX)
        or len(prefix) != LOOKUP_LEN
    ]
    if bad:
        return Check("api keys", False, f"{len(bad)} keys unusable: {', '.join(bad[:5])}")
    return Check("api keys", True, f"{len(rows)} keys, hashed as this version hashes them")


def webhook_secrets_decrypt(conn: psycopg.Connection) -> Check:
    table = WebhookEndpoint._meta.db_table
    rows = conn.execute(f"SELECT id, secret_encrypted FROM {table} ORDER BY id").fetchall()
    unreadable = []
    for endpoint_id, stored in rows:
        try:
            signing.decrypt(stored)
        except (signing.SecretUnreadable, ValueError):
            unreadable.append(endpoint_id)
    if unreadable:
        return Check(
            "webhook secrets",
            False,
            f"{len(unreadable)} of {len(rows)} do not decrypt with this SECRET_KEY: "
            + ", ".join(unreadable[:5]),
        )
    return Check("webhook secrets", True, f"{len(rows)} decrypt with this SECRET_KEY")

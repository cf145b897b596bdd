"""MemoryHub's own system checks (`manage.py check`, `check --deploy`): the production key, the
bench's events switch, and the database server (versions, connections)."""

from __future__ import annotations

import re
from typing import cast

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections

from memoryhub.connections import node_connections
from memoryhub.supervisor import default_workers


@register(Tags.security, deploy=True)
def development_secret_key_in_production(app_configs, **kwargs) -> list[Error]:
    """Production mode with the built-in development SECRET_KEY: sessions, CSRF tokens and
    password-reset links would be signed with a key printed in this repository. Django's own
    security.W009 does not catch it (the key is long and varied enough), and a warning would
    not stop a deploy script that runs `check --deploy --fail-level ERROR`."""
    if getattr(settings, "MEMORYHUB_PRODUCTION", False) and (
        settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY
    ):
        return [
            Error(
                "MEMORYHUB_PRODUCTION is on but SECRET_KEY is the built-in development key.",
                hint="Set the SECRET_KEY environment variable to a long random value, e.g. "
                "python -c 'import secrets; print(secrets.token_urlsafe(50))'.",
                id="memoryhub.E001",
            )
        ]
    return []


@register()
def events_off(app_configs, **kwargs) -> list[Warning]:
    """MEMORYHUB_BENCH_NO_EVENTS is for the bench's paired load only: with it, changes reach
    neither the change feed nor the webhooks."""
    if getattr(settings, "MEMORYHUB_BENCH_NO_EVENTS", False):
        return [
            Warning(
                "MEMORYHUB_BENCH_NO_EVENTS is on: writes record no events, so GET "
                "/api/v1/events and the webhooks miss them.",
                hint="Unset it; it exists for `bench --load --pair observability` only.",
                id="memoryhub.W001",
            )
        ]
    return []


# The oldest servers MemoryHub runs on: keyword and hybrid search use `any_value` (PostgreSQL
# 16), semantic search pgvector's iterative index scans (0.8).
MIN_POSTGRESQL = 16
MIN_PGVECTOR = (0, 8)
SERVER_FACTS_SQL = """
SELECT name, setting FROM pg_settings
WHERE name IN ('server_version', 'server_version_num', 'max_connections',
               'superuser_reserved_connections', 'reserved_connections')
UNION ALL
SELECT 'vector', coalesce(
    (SELECT extversion FROM pg_extension WHERE extname = 'vector'),
    (SELECT default_version FROM pg_available_extensions WHERE name = 'vector'))
"""


def server_facts() -> dict[str, str | None]:
    """What the database server reports: its version, pgvector's (installed, else the one
    `CREATE EXTENSION` would install; None when there is none) and its connection limits."""
    with connections["default"].cursor() as cursor:
        cursor.execute(SERVER_FACTS_SQL)
        return dict(cursor.fetchall())


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


@register(Tags.database)
def database_server(app_configs, databases=None, **kwargs) -> list[CheckMessage]:
    """The server's versions (errors) and this node's connections against what it allows (a
    warning). Runs where the database is checked: `migrate`, `check --database default`, and
    a plain `check` against an external server (DATABASE_URL; memoryhub's `check` command)."""
    if not databases or "default" not in databases:
        return []
    try:
        facts = server_facts()
    except Exception as exc:  # noqa: BLE001  a check reports what it could not read, never crashes
        return [
            Warning(
                f"The database server's versions and limits could not be read: {exc}",
                hint="Check DATABASE_URL and that the server accepts connections.",
                id="memoryhub.W003",
            )
        ]
    found: list[CheckMessage] = []
    version_num = int(facts.get("server_version_num") or 0)
    if version_num < MIN_POSTGRESQL * 10000:
        found.append(
            Error(
                f"PostgreSQL {facts.get('server_version')} is too old: MemoryHub needs "
                f"{MIN_POSTGRESQL} or later (keyword and hybrid search use any_value).",
                hint="Upgrade the server (docs/operations.md#an-external-postgresql-production).",
                id="memoryhub.E002",
            )
        )
    vector = facts.get("vector")
    if vector is None or _version(vector) < MIN_PGVECTOR:
        have = f"pgvector {vector}" if vector else "no pgvector"
        found.append(
            Error(
                f"The server has {have}: MemoryHub needs pgvector "
                f"{'.'.join(map(str, MIN_PGVECTOR))} or later (iterative index scans).",
                hint="Install or update the server's pgvector, then ALTER EXTENSION vector UPDATE.",
                id="memoryhub.E003",
            )
        )
    allowed = int(facts.get("max_connections") or 0) - sum(
        int(facts.get(name) or 0)
        for name in ("superuser_reserved_connections", "reserved_connections")
    )
    need = node_connections(
        budget=settings.MEMORYHUB_DB_CONNECTIONS,
        workers=default_workers(),
        cluster_workers=cast(int, settings.Q_CLUSTER["workers"]),
    )
    if need["total"] > allowed:
        found.append(
            Warning(
                f"This node may open {need['total']} database connections: its web "
                f"processes' {need['web']} (MEMORYHUB_DB_CONNECTIONS, or {need['workers']} "
                f"processes × {need['per_process']} pooled where more), {need['listening']} "
                f"listening and the cluster's {need['cluster']}. The server allows {allowed} "
                f"(max_connections {facts.get('max_connections')} less the reserved ones).",
                hint="Lower MEMORYHUB_DB_CONNECTIONS (what this node's web processes share), "
                "WEB_CONCURRENCY or MEMORYHUB_Q_WORKERS, or raise max_connections; with several "
                "nodes, see docs/operations.md#connections-for-several-nodes.",
                id="memoryhub.W002",
            )
        )
    return found

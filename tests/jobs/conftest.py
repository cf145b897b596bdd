"""Fixtures for the job tests: a fixed clock, bulk memory builders, and a subprocess runner for
the management commands against this run's test database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from memories.models import Memory, MemoryRevision

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BASE_DIR = Path(settings.BASE_DIR)


@pytest.fixture
def now():
    return NOW


def add_memories(
    tenant,
    agent=None,
    n: int = 1,
    *,
    category: str = "core",
    updated_at: datetime | None = None,
    expires_at: datetime | None = None,
    last_accessed_at: datetime | None = None,
    thread_id: str | None = None,
    text: str = "fact",
) -> list[Memory]:
    """`n` active memories of `agent` (None: workspace) written at `updated_at` (default NOW)."""
    updated_at = updated_at or NOW
    if category == "conversation" and thread_id is None:
        thread_id = "thread-1"
    rows = [
        Memory(
            tenant=tenant,
            agent=agent,
            created_by=f"agent:{agent.slug}" if agent else "operator:test@acme.test",
            category=category,
            text=f"{text} {i}",
            thread_id=thread_id,
            expires_at=expires_at,
            created_at=updated_at,
            updated_at=updated_at,
            last_confirmed_at=updated_at,
            last_accessed_at=last_accessed_at or updated_at,
        )
        for i in range(n)
    ]
    return Memory.objects.bulk_create(rows, batch_size=5000)


def prune_revisions(**filters):
    return MemoryRevision.objects.filter(actor="system:prune", **filters)


def last_json_line(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def _database_url() -> str:
    db = connection.settings_dict
    host = quote(str(db["HOST"]), safe="")
    return f"postgres://{db['USER']}@{host}:{db['PORT']}/{db['NAME']}"


def command_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=_database_url(),
        MEMORYHUB_TESTING="1",
        PYTHONUNBUFFERED="1",
        DB_CONN_MAX_AGE="0",
    )
    return env


def start_command(*args: str) -> subprocess.Popen:
    """Start `manage.py <args>` in a subprocess on this test database (commit data first)."""
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=BASE_DIR,
        env=command_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ago(**delta) -> datetime:
    return NOW - timedelta(**delta)

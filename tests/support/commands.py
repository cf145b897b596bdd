"""Management commands and server processes run in a subprocess against this run's test
database: the environment they need, a starter, and their output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import connection

BASE_DIR = Path(settings.BASE_DIR)


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
        DJANGO_SETTINGS_MODULE="memoryhub.settings_test",
        PYTHONUNBUFFERED="1",
        DB_CONN_MAX_AGE="0",
    )
    return env


def start_command(
    *args: str, env: dict[str, str] | None = None, entry: tuple[str, ...] = ("manage.py",)
) -> subprocess.Popen:
    """Start `manage.py <args>` in a subprocess on this test database (commit data first);
    `env` adds environment variables; `entry`: what runs instead of `manage.py` (say
    `("-m", "tests.support.module")`)."""
    return subprocess.Popen(
        [sys.executable, *entry, *args],
        cwd=BASE_DIR,
        env=command_env() | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_answering(url: str, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            httpx.get(url + "/healthz", timeout=2)
            return
        except httpx.TransportError:
            time.sleep(0.1)  # polling a server starting up, not timing anything
    raise AssertionError("the server did not start")


def until(condition, timeout: float, what: str, interval: float = 0.02):
    """Poll `condition` until it returns something truthy (bounded); return that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)  # polling a condition with a deadline, not waiting for time
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")

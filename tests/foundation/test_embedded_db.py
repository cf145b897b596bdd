"""The embedded PostgreSQL is shared by processes and recovered after a crash."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import psycopg
from memoryhub.embedded_db import ensure_server
server = ensure_server(sys.argv[1])
with psycopg.connect(server.dsn(), autocommit=True) as conn:
    pid = conn.execute("SELECT pg_postmaster_start_time()::text").fetchone()[0]
    if len(sys.argv) > 2 and sys.argv[2] == "write":
        conn.execute("CREATE TABLE IF NOT EXISTS probe (v text)")
        conn.execute("INSERT INTO probe VALUES ('kept')")
    rows = conn.execute(
        "SELECT count(*) FROM pg_tables WHERE tablename = 'probe'").fetchone()[0]
    kept = conn.execute("SELECT count(*) FROM probe").fetchone()[0] if rows else 0
info = open(server.data_dir / "pg" / "postmaster.pid").read().split()[0]
print(json.dumps({"postmaster": int(info), "started": pid, "kept": kept}))
"""


def run_probe(data_dir: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", PROBE, str(data_dir), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def data_dir():
    # Short path: the server's socket lives inside it. Not under pytest's tmp_path: when we are
    # root PostgreSQL runs as another user, and any pytest session starting meanwhile resets
    # /tmp/pytest-of-<user> to mode 0700, cutting the server off from its files.
    path = Path(tempfile.mkdtemp(prefix="memoryhub-pg-"))
    yield path
    from memoryhub.embedded_db import stop_server

    try:
        stop_server(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_two_processes_starting_at_once_share_one_server(data_dir):
    first, second = run_probe(data_dir, "write"), run_probe(data_dir)
    a, b = result(first), result(second)
    assert a["postmaster"] == b["postmaster"]
    assert a["started"] == b["started"]
    # A third process later reuses the running server rather than starting another.
    c = result(run_probe(data_dir))
    assert c["postmaster"] == a["postmaster"]
    assert c["kept"] == 1


def test_server_killed_with_sigkill_is_recovered_with_its_data(data_dir):
    before = result(run_probe(data_dir, "write"))
    postmaster = psutil.Process(before["postmaster"])
    children = postmaster.children(recursive=True)
    os.kill(before["postmaster"], signal.SIGKILL)
    psutil.wait_procs([postmaster, *children], timeout=30)
    assert not psutil.pid_exists(before["postmaster"]) or (
        psutil.Process(before["postmaster"]).status() == psutil.STATUS_ZOMBIE
    )
    # postmaster.pid is still there, naming a dead process: the next start recovers.
    assert (data_dir / "pg" / "postmaster.pid").exists()
    after = result(run_probe(data_dir))
    assert after["postmaster"] != before["postmaster"]
    assert after["kept"] == 1


@pytest.mark.parametrize(
    ("gib", "shared", "cache"),
    [
        (0.25, "128MB", "128MB"),  # never below PostgreSQL's own default
        (2, "512MB", "1024MB"),
        (24, "6144MB", "12288MB"),  # a quarter and a half
        (64, "8192MB", "32768MB"),  # buffers capped: the web and workers share the machine
    ],
)
def test_the_servers_memory_follows_the_machines(gib, shared, cache):
    from memoryhub.embedded_db import memory_settings

    assert memory_settings(int(gib * 2**30)) == {
        "shared_buffers": shared,
        "effective_cache_size": cache,
    }


def test_a_started_server_runs_with_the_memory_settings(data_dir):
    import psycopg

    from memoryhub.embedded_db import ensure_server, machine_memory_bytes, memory_settings

    server = ensure_server(data_dir)
    wanted = memory_settings(machine_memory_bytes())
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for name, value in wanted.items():
            shown = conn.execute(
                "SELECT setting::bigint * pg_size_bytes(unit) FROM pg_settings WHERE name = %s",
                [name],
            ).fetchone()[0]
            assert shown == int(value.removesuffix("MB")) * 2**20
        # Millisecond statements are never JIT-compiled, however big the planner's estimate.
        assert conn.execute("SHOW jit").fetchone()[0] == "off"


def django_process(data_dir: Path, *args: str) -> str:
    """A process with the product's settings on the embedded server of `data_dir`."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(MEMORYHUB_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="memoryhub.settings")
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_settings_start_nothing_and_the_first_connection_starts_the_server(data_dir):
    pgdata = data_dir / "pg"
    code = "import memoryhub.settings as s; print(s.DATABASES['default']['HOST'])"
    assert django_process(data_dir, "-c", code).split() == [str(pgdata)]
    django_process(data_dir, "manage.py", "check")
    assert not (pgdata / "PG_VERSION").exists() and not (pgdata / "postmaster.pid").exists()

    connect = "import django; django.setup(); from django.db import connection; connection.cursor()"
    django_process(data_dir, "-c", connect)
    from memoryhub.embedded_db import running_info

    assert running_info(pgdata) is not None


def test_where_a_server_listens_is_known_before_it_starts(data_dir):
    from memoryhub.embedded_db import embedded_server, ensure_server

    expected = embedded_server(data_dir)
    assert ensure_server(data_dir) == expected
    assert embedded_server(data_dir) == expected  # as its postmaster.pid says

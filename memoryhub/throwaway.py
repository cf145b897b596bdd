"""A throwaway embedded PostgreSQL for this process, and the real web server on top of it: what
`manage.py screenshots` and the benchmarks (the repository's `bench/`) run on, so that nothing
touches the developer's database."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from memoryhub.embedded_db import ensure_server, stop_server

# PostgreSQL's settings that trade durability for speed (memoryhub/embedded_db.py
# THROWAWAY_SETTINGS turns them off); a timed figure is taken with them as installed: on.
DURABILITY = ("fsync", "synchronous_commit", "full_page_writes")


@contextmanager
def throwaway_database(
    out: Callable[[str], None] = print, *, durable: bool = False, statement_stats: bool = False
) -> Iterator[Path]:
    """Start an embedded PostgreSQL in a temp dir, point this process at it, migrate it.

    `durable`: with PostgreSQL's settings as a real install has them (every commit flushed to
    disk, full-page writes), for figures that are timed; else without (faster, for what is only
    counted, such as an evaluation's recall). `statement_stats`: with pg_stat_statements loaded
    (the bench's `statements`). On exit the server is stopped and the directory
    removed; this process's `default` connection is pointed back where it was.
    """
    data_dir = Path(tempfile.mkdtemp(prefix="memoryhub-bench-"))
    started = time.monotonic()
    server = ensure_server(data_dir, throwaway=not durable, statement_stats=statement_stats)
    connection = connections["default"]
    saved_settings = dict(connection.settings_dict)
    saved_data_dir = settings.DATA_DIR
    _disconnect(connection)
    connection.settings_dict.update(server.database_settings())
    settings.DATABASES["default"].update(server.database_settings())
    settings.DATA_DIR = data_dir
    try:
        call_command("migrate", verbosity=0, interactive=False)
        settings_line = ", ".join(f"{name} {value}" for name, value in durability().items())
        out(
            f"throwaway PostgreSQL ready in {time.monotonic() - started:.1f}s at {data_dir} "
            f"({settings_line})"
        )
        yield data_dir
    finally:
        _disconnect(connection)
        connection.settings_dict.clear()
        connection.settings_dict.update(saved_settings)
        settings.DATABASES["default"].update(saved_settings)  # type: ignore[typeddict-item]
        settings.DATA_DIR = saved_data_dir
        try:
            stop_server(data_dir)
        finally:
            shutil.rmtree(data_dir, ignore_errors=True)


def durability() -> dict[str, str]:
    """The `DURABILITY` settings of the database this process uses (`on` / `off`)."""
    values = {}
    with connections["default"].cursor() as cursor:
        for name in DURABILITY:
            cursor.execute(f"SHOW {name}")
            values[name] = cursor.fetchone()[0]
    return values


def _disconnect(connection) -> None:
    """Close the connection and its pool (a pool keeps pointing at the server it was made for)."""
    connection.close()
    if hasattr(connection, "close_pool"):
        connection.close_pool()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(data_dir: Path, embedder: str) -> dict[str, str]:
    """The environment of a server on `data_dir`: its embedder, offline, quiet, and
    never the developer's database."""
    env = dict(
        os.environ,
        MEMORYHUB_DATA_DIR=str(data_dir),
        MEMORYHUB_EMBEDDER=embedder,
        DJANGO_SETTINGS_MODULE="memoryhub.settings",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        LOG_LEVEL="WARNING",
    )
    env.pop("DATABASE_URL", None)
    return env


class ApiServer:
    """`python -m uvicorn memoryhub.asgi:application` on a free 127.0.0.1 port, on `data_dir`."""

    def __init__(self, data_dir: Path, *, embedder: str = "hashing"):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        env = server_env(data_dir, embedder)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "memoryhub.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=settings.BASE_DIR,
            env=env,
        )

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError("the bench web server exited during start-up")
            try:
                if httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the bench web server did not start")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> ApiServer:
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

"""Serve MemoryHub: the ASGI web server (uvicorn) and the django-q2 cluster, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from django.core.management.base import BaseCommand


def processes(*, host: str, port: int, workers: int, cluster: bool = True) -> list[list[str]]:
    """The commands `serve` starts, the web server last: the django-q2 cluster (unless
    `cluster` is false) and uvicorn serving the ASGI app."""
    commands = [[sys.executable, "manage.py", "qcluster"]] if cluster else []
    commands.append(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "memoryhub.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    )
    return commands


class Command(BaseCommand):
    help = "Start the web server (uvicorn, ASGI: console, REST, MCP) and the django-q2 cluster."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("MEMORYHUB_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("MEMORYHUB_PORT", 8000)))
        parser.add_argument(
            "--workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", 1))
        )
        parser.add_argument("--no-cluster", action="store_true", help="do not start django-q2")

    def handle(self, *args, **opts):
        env = dict(os.environ)
        running = [
            subprocess.Popen(command, env=env)
            for command in processes(
                host=opts["host"],
                port=opts["port"],
                workers=opts["workers"],
                cluster=not opts["no_cluster"],
            )
        ]
        web = running[-1]
        self.stdout.write(
            f"MemoryHub on http://{opts['host']}:{opts['port']}/console/ "
            f"(API /api/v1/, MCP /mcp, docs /api/docs/). Ctrl-C stops."
        )

        def stop(*_):
            for proc in running:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, stop)
        try:
            web.wait()
        except KeyboardInterrupt:
            pass
        finally:
            stop()
            for proc in running:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()

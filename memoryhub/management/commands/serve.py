"""Serve MemoryHub: the ASGI web server (uvicorn) and the django-q2 cluster, stopped together."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from django.core.management.base import BaseCommand


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
        processes: list[subprocess.Popen] = []
        if not opts["no_cluster"]:
            processes.append(subprocess.Popen([sys.executable, "manage.py", "qcluster"], env=env))
        web = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "memoryhub.asgi:application",
                "--host",
                opts["host"],
                "--port",
                str(opts["port"]),
                "--workers",
                str(opts["workers"]),
                "--no-access-log",
                "--log-level",
                "warning",
            ],
            env=env,
        )
        processes.append(web)
        self.stdout.write(
            f"MemoryHub on http://{opts['host']}:{opts['port']}/console/ "
            f"(API /api/v1/, MCP /mcp, docs /api/docs/). Ctrl-C stops."
        )

        def stop(*_):
            for proc in processes:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGTERM, stop)
        try:
            web.wait()
        except KeyboardInterrupt:
            pass
        finally:
            stop()
            for proc in processes:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()

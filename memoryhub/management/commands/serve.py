"""`python manage.py serve`: the web server (uvicorn, ASGI: console, REST, MCP) and the
django-q2 cluster, kept running with the embedded PostgreSQL by `memoryhub.supervisor` (how it
restarts what dies, stops on SIGTERM/SIGINT and says when it is ready: that module's
docstring). It refuses to start on a database with unapplied migrations."""

from __future__ import annotations

import os

from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from memoryhub.schema import unapplied_migrations
from memoryhub.supervisor import default_workers, supervise


class Command(BaseCommand):
    help = (
        "Start the web server (uvicorn, ASGI: console, REST, MCP) and the django-q2 cluster, "
        "and keep them (and the embedded PostgreSQL) running."
    )

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("MEMORYHUB_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("MEMORYHUB_PORT", 8000)))
        parser.add_argument(
            "--workers",
            type=int,
            default=default_workers(),
            help="web processes (default: WEB_CONCURRENCY, else one per core)",
        )
        parser.add_argument("--no-cluster", action="store_true", help="do not start django-q2")

    def handle(self, *args, **opts):
        self.check_schema()
        supervise(
            host=opts["host"],
            port=opts["port"],
            workers=opts["workers"],
            cluster=not opts["no_cluster"],
            out=self.write_line,
        )

    def check_schema(self) -> None:
        """Old code on a newer schema, or new code on an older one, fails request by request:
        refuse to start instead. A database that cannot be reached yet is no reason to refuse
        (the web processes answer 503 until it is back), only to say so."""
        try:
            pending = unapplied_migrations()
        except DatabaseError as exc:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc)
            self.stderr.write(f"could not check the migrations: {first_line}")
            return
        if pending:
            raise CommandError(
                f"the database has unapplied migrations ({', '.join(pending)}): "
                "run `python manage.py migrate` first"
            )

    def write_line(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()

"""`manage.py extract_threads`: run memory formation now instead of waiting for the
every-minute schedule; `--run ID` executes one queued run (what a django-q2 worker does)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from memories.formation.runs import extract_due_threads, run_execute
from memories.models import ExtractionRun
from memories.validation import parse_timestamp
from memoryhub.errors import InvalidInput


class Command(BaseCommand):
    help = (
        "Request extraction runs for every thread idle past its due time (and re-queue runs "
        "whose worker died); with --run, execute that run here. Ends with one JSON line."
    )

    def add_arguments(self, parser):
        parser.add_argument("--run", type=int, help="execute this extraction run in-process")
        parser.add_argument("--now", help="evaluate due times as if it were this ISO 8601 time")

    def handle(self, *args, **opts):
        try:
            now = parse_timestamp(opts["now"], "--now") if opts["now"] else None
        except InvalidInput as exc:
            raise CommandError(exc.message) from exc
        if opts["run"] is not None:
            if not ExtractionRun.objects.filter(pk=opts["run"]).exists():
                raise CommandError(f"no extraction run {opts['run']}")
            run = run_execute(opts["run"], now=now)
            if run is None:
                result = {"run": opts["run"], "executed": False}
            else:
                result = {"run": run.pk, "executed": True, "state": run.state, "counts": run.counts}
        else:
            result = {"requested": extract_due_threads(now=now)}
        self.stdout.write(json.dumps(result, sort_keys=True))

"""What the three job commands share: `--now`, `--dry-run`, `--batch-size`, `--tenant`, progress
on stdout (flushed line by line, so a supervisor sees each committed batch) and one final JSON
line."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from accounts.models import Tenant
from memories.tasks import run_job


class JobCommand(BaseCommand):
    job: str = ""
    default_batch_size: int | None = None

    def add_arguments(self, parser):
        parser.add_argument(
            "--now", help="evaluate every rule as if it were this ISO 8601 time (default: now)"
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="print what would change; change nothing"
        )
        parser.add_argument("--batch-size", type=int, default=self.default_batch_size)
        parser.add_argument("--tenant", help="only this tenant (slug); default: every tenant")

    def job_options(self, opts) -> dict:
        return {}

    def handle(self, *args, **opts):
        options = self.job_options(opts)
        if opts["batch_size"] is not None:
            if opts["batch_size"] < 1:
                raise CommandError("--batch-size must be at least 1")
            options["batch_size"] = opts["batch_size"]
        if opts["tenant"]:
            tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
            if tenant is None:
                raise CommandError(f"no tenant {opts['tenant']!r}")
            options["tenant_id"] = tenant.pk
        try:
            run = run_job(
                self.job,
                trigger="command",
                now=opts["now"],
                dry_run=opts["dry_run"],
                progress=self.progress,
                **options,
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(json.dumps(run.counts, sort_keys=True))
        self.stdout.flush()

    def progress(self, message: str) -> None:
        self.stdout.write(message)
        self.stdout.flush()

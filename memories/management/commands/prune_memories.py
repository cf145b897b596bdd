from django.core.management.base import CommandError

from memories.jobs.command import JobCommand


class Command(JobCommand):
    help = (
        "Mark expired memories, prune daily (72 h) and idle conversation (24 h) memories, "
        "enforce entry caps; ends with one JSON line of counts."
    )
    job = "prune_memories"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="database connections working at once (default 1; SKIP LOCKED shares the rows)",
        )

    def job_options(self, opts) -> dict:
        if opts["workers"] < 1:
            raise CommandError("--workers must be at least 1")
        return {"workers": opts["workers"]} if opts["workers"] > 1 else {}

from memories.jobs.command import JobCommand


class Command(JobCommand):
    help = (
        "Hard-delete tombstoned/evicted/expired memories past retention, idempotency records "
        "past 24 h and the messages of threads ended past message retention; ends with one "
        "JSON line of counts."
    )
    job = "purge_retention"

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument(
            "--days", type=int, help="retention in days (default: MEMORYHUB_RETENTION_DAYS)"
        )
        parser.add_argument(
            "--message-days",
            type=int,
            help="message retention in days after a thread ended "
            "(default: MEMORYHUB_MESSAGE_RETENTION_DAYS)",
        )

    def job_options(self, opts) -> dict:
        return {"days": opts["days"], "message_days": opts["message_days"]}

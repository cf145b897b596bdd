from memories.jobs.command import JobCommand
from memories.jobs.reembed import DEFAULT_REEMBED_BATCH


class Command(JobCommand):
    help = (
        "(Re)compute embeddings that are missing or from another model (--all: every one); "
        "resumable; ends with one JSON line of counts."
    )
    job = "reembed"
    default_batch_size = DEFAULT_REEMBED_BATCH

    def add_arguments(self, parser):
        super().add_arguments(parser)
        parser.add_argument("--all", action="store_true", help="re-embed every memory")
        parser.add_argument("--batch", type=int, dest="batch_size", help="alias of --batch-size")

    def job_options(self, opts) -> dict:
        return {"all_memories": opts["all"]}

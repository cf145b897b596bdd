from memories.jobs.command import JobCommand


class Command(JobCommand):
    help = (
        "Mark expired memories, prune daily (72 h) and idle conversation (24 h) memories, "
        "enforce entry caps; ends with one JSON line of counts."
    )
    job = "prune_memories"

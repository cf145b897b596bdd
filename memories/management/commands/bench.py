"""`python manage.py bench`: the benchmarks (docs/benchmarks.md), run by the repository's
`bench/` package (`python -m bench` runs the same); this command only hands over to it."""

from __future__ import annotations

from memories.management.harness import HarnessCommand


class Command(HarnessCommand):
    name = "bench"
    help = "Benchmarks (the repository's bench/ package; docs/benchmarks.md)."

    def harness(self):
        from bench.commands.bench import Command

        return Command

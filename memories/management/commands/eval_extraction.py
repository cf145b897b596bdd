"""`python manage.py eval_extraction`: memory formation measured on LoCoMo (docs/formation.md),
run by the repository's `bench/` package (`python -m bench eval_extraction` runs the same);
this command only hands over to it."""

from __future__ import annotations

from memories.management.harness import HarnessCommand


class Command(HarnessCommand):
    name = "eval_extraction"
    help = "Evaluate memory formation on LoCoMo (the repository's bench/ package)."

    def harness(self):
        from bench.commands.eval_extraction import Command

        return Command

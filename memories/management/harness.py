"""Commands whose code lives in the repository's `bench/` package (the benchmarks, the
formation evaluation) rather than in the installed one: `HarnessCommand` imports its harness
only when it is used, takes the harness's help and options, and hands the run over. Where
`bench/` is not importable (an installed wheel has none) it says so instead of failing on an
import.
"""

from __future__ import annotations

import sys

from django.core.management.base import BaseCommand, CommandError

MISSING = (
    "`{name}` runs the benchmark harness, the repository's bench/ package, which is not part "
    "of the installed package: run it from a checkout of the repository (`python -m bench`, "
    "docs/benchmarks.md)"
)


class HarnessCommand(BaseCommand):
    name = ""  # the command's name, for the message when the harness is missing

    def harness(self) -> type[BaseCommand]:
        """The harness's command class (imported there, never at the top of a module)."""
        raise NotImplementedError

    def _harness(self) -> type[BaseCommand] | None:
        try:
            return self.harness()
        except ModuleNotFoundError as exc:
            if exc.name != "bench" and not (exc.name or "").startswith("bench."):
                raise  # the harness is there; something it imports is not
            return None

    def create_parser(self, prog_name, subcommand, **kwargs):
        harness = self._harness()
        if harness is not None:
            self.help = harness.help
        return super().create_parser(prog_name, subcommand, **kwargs)

    def add_arguments(self, parser):
        harness = self._harness()
        if harness is not None:
            harness().add_arguments(parser)

    def run_from_argv(self, argv):
        # Without the harness its options are unknown: say what is missing rather than
        # "unrecognized arguments".
        if self._harness() is None:
            sys.stderr.write(f"CommandError: {MISSING.format(name=self.name)}\n")
            sys.exit(1)
        super().run_from_argv(argv)

    def handle(self, *args, **options):
        harness = self._harness()
        if harness is None:
            raise CommandError(MISSING.format(name=self.name))
        command = harness()
        command.stdout, command.stderr, command.style = self.stdout, self.stderr, self.style
        return command.handle(*args, **options)

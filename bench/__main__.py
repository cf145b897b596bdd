"""`python -m bench [options]`: the benchmarks, with the options of `python manage.py bench`
(`--help` lists them); `python -m bench eval_extraction [options]`: the formation evaluation on
LoCoMo. Run from the repository root: the harness is not part of the installed package."""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings")
    import django

    django.setup()
    # After setup: the commands import the models.
    from bench.commands import bench, eval_extraction

    if argv[:1] == ["eval_extraction"]:
        eval_extraction.Command().run_from_argv(["python -m bench", *argv])
    else:
        # The usage line names the program "<argv[0]> <command>": "python -m bench".
        bench.Command().run_from_argv(["python -m", "bench", *argv])


if __name__ == "__main__":
    main(sys.argv[1:])

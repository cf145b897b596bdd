"""`python -m tests.support.dies_before_apply <command> ...`: `manage.py <command> ...` in a
process that kills itself (SIGKILL) when an extraction run is about to apply the model's kept
answer: a worker that dies between the answer and the apply, for the formation crash test."""

from __future__ import annotations

import os
import signal
import sys

import django
from django.core.management import execute_from_command_line


def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings_test")
    django.setup()
    from memories.formation import runs

    runs.apply_operations = die
    execute_from_command_line(["manage.py", *sys.argv[1:]])

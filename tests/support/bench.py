"""`python manage.py bench ...` (or `python -m bench ...`) as a subprocess for the bench tests: home on the running test
server's data directory (the bench makes its own throwaway one), offline, not in test mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings


def run_bench(
    *args: str, timeout: float = 300, entry: tuple[str, ...] = ("manage.py", "bench")
) -> subprocess.CompletedProcess:
    """`python manage.py bench ARGS`; `entry=("-m", "bench")`: `python -m bench ARGS`."""
    env = dict(
        os.environ,
        MEMORYHUB_DATA_DIR=str(settings.DATA_DIR),
        HF_HUB_OFFLINE="1",
        DJANGO_SETTINGS_MODULE="memoryhub.settings",
    )
    return subprocess.run(
        [sys.executable, *entry, *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def throwaway_dir(output: str) -> Path:
    """The data directory a command's "throwaway PostgreSQL ready in …s at DIR (settings)" line
    names (memoryhub/throwaway.py)."""
    line = output.split("throwaway PostgreSQL ready in ")[1].splitlines()[0]
    path = Path(line.split(" at ", 1)[1].split(" (fsync ")[0])
    assert path.name.startswith("memoryhub-bench-"), line  # the path, not the line's tail
    return path

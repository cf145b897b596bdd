"""`python manage.py bench ...` as a subprocess for the bench tests: home on the running test
server's data directory (the bench makes its own throwaway one), offline, not in test mode."""

from __future__ import annotations

import os
import subprocess
import sys

from django.conf import settings


def run_bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, MEMORYHUB_DATA_DIR=str(settings.DATA_DIR), HF_HUB_OFFLINE="1")
    env.pop("MEMORYHUB_TESTING", None)
    return subprocess.run(
        [sys.executable, "manage.py", "bench", *args],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )

"""Programs from the system's packages that some tests run (redis-server, pgbouncer, nginx ...):
found on PATH or in the sbin folders, or the test is skipped, named, and the run's summary lists
it under "skipped: component not installed" (tests/conftest.py). `.ci/run` installs them.

- `@pytest.mark.requires_component("redis-server")` on a test (or `pytestmark` on a module):
  skipped before its fixtures run when the program is missing.
- `component_path("redis-server")` in a fixture: the program's path, or the same skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time

import pytest

# Every skip's reason starts with this: the summary groups the skipped tests by what follows.
SKIP_PREFIX = "component not installed: "
# Debian installs daemons (pgbouncer, nginx) in sbin, which a non-root PATH may lack.
_SEARCHED = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


def find_component(name: str) -> str | None:
    """The program's path, or None when it is not installed."""
    return shutil.which(name, path=_SEARCHED)


def component_path(name: str) -> str:
    """The program's path; skips the calling test (or fixture's tests) when it is missing."""
    path = find_component(name)
    if path is None:
        pytest.skip(SKIP_PREFIX + name)
    return path


def skipped_component(reason: str) -> str | None:
    """The component a skip's reason names (as pytest reports it), or None for another skip."""
    _, found, name = reason.partition(SKIP_PREFIX)
    return name.strip() or None if found else None


def wait_accepting(process: subprocess.Popen, port: int, what: str) -> None:
    """Return once `process` (a started component) accepts connections on 127.0.0.1:`port`;
    raise with its output if it exits first, or after 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read() if process.stdout else ""
            raise RuntimeError(f"{what} exited: {output!r}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.1):
                return
        except OSError:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.02)  # polling a program starting up
    raise RuntimeError(f"{what} did not listen on {port}")

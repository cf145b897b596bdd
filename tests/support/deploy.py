"""The reference configurations of `deploy/` (nginx, PgBouncer, systemd) as a test runs them:
filled in, not copied, so a test that passes ran the files a team installs.

- `render(name, **values)`: the file `deploy/<name>` with each `{{NAME}}` replaced; a
  placeholder left without a value, or a value the file has no placeholder for, is an error.
- `environment(text)`: an EnvironmentFile's `NAME=value` lines as a dict (comments skipped).
- `exec_start(name)`: a unit's `ExecStart=` command line, split, its virtual environment's
  Python replaced by this one (the code is this checkout, run from its root).
- `running_nginx(config)`: Debian's `nginx` on a rendered `deploy/nginx/memoryhub.conf`, in
  the foreground with every path in a throwaway prefix.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from tests.support.components import component_path, wait_accepting

DEPLOY = Path(settings.BASE_DIR) / "deploy"
# Where the units expect the installed code and its virtual environment.
INSTALLED_PYTHON = "/opt/memoryhub/.venv/bin/python"

_PLACEHOLDER = re.compile(r"\{\{([A-Z_]+)\}\}")


def render(name: str, **values: str) -> str:
    text = (DEPLOY / name).read_text()
    wanted = set(_PLACEHOLDER.findall(text))
    missing, unused = wanted - values.keys(), values.keys() - wanted
    assert not missing and not unused, f"{name}: missing {missing or '-'}, unused {unused or '-'}"
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], text)


def environment(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            env[name.strip()] = value.strip()
    return env


def exec_start(name: str) -> list[str]:
    (line,) = [
        line for line in (DEPLOY / name).read_text().splitlines() if line.startswith("ExecStart=")
    ]
    command = line.removeprefix("ExecStart=").replace(INSTALLED_PYTHON, sys.executable)
    return shlex.split(command)


@contextlib.contextmanager
def running_nginx(config: str, port: int) -> Iterator[Path]:
    """nginx with `config` (a rendered deploy/nginx/memoryhub.conf) in its http block, until
    the block ends; yields its prefix folder (error.log, access.log)."""
    binary = component_path("nginx")
    with tempfile.TemporaryDirectory(prefix="nginx-") as folder:
        prefix = Path(folder)
        prefix.chmod(0o755)
        (prefix / "memoryhub.conf").write_text(config)
        (prefix / "nginx.conf").write_text(
            f"pid {prefix}/nginx.pid;\n"
            f"error_log {prefix}/error.log warn;\n"
            "worker_processes 1;\n"
            "events { worker_connections 512; }\n"
            "http {\n"
            f"    access_log {prefix}/access.log;\n"
            + "".join(
                f"    {kind}_temp_path {prefix}/{kind}_temp;\n"
                for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
            )
            + f"    include {prefix}/memoryhub.conf;\n"
            "}\n"
        )
        error_log = str(prefix / "error.log")
        process = subprocess.Popen(
            [binary, "-p", str(prefix), "-e", error_log, "-c", "nginx.conf", "-g", "daemon off;"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_accepting(process, port, "nginx")
            yield prefix
        finally:
            process.terminate()
            process.wait(timeout=30)

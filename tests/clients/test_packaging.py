"""`pip install ./clients/python` works in a clean virtualenv: the package installs with httpx
as its only dependency, ships `py.typed`, and talks to nothing of the server's."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CLIENT = Path(__file__).resolve().parents[2] / "clients" / "python"
OFFLINE_SIGNS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


@pytest.mark.packaging
def test_the_client_installs_and_imports_in_a_clean_venv(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(
        CLIENT, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    # pip finds setuptools and httpx on PyPI or, offline, in its cache.
    install = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    if install.returncode and any(sign in install.stderr for sign in OFFLINE_SIGNS):
        pytest.skip("no package index reachable and nothing cached")
    assert install.returncode == 0, install.stderr
    check = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as md, importlib.resources as r, sys\n"
            "import memoryhub_client as m\n"
            "hub = m.MemoryHub('http://127.0.0.1:9', 'mh_x', retry=m.RetryPolicy(retries=0))\n"
            "try:\n"
            "    hub.keys()\n"
            "except m.MemoryHubConnectionError as err:\n"
            "    print(err.code)\n"
            "print(r.files('memoryhub_client').joinpath('py.typed').is_file())\n"
            "print(md.requires('memoryhub-client')[0])\n"
            "print('django' in sys.modules, 'langgraph' in sys.modules)\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.split("\n")[:4] == [
        "CONNECTION_ERROR",
        "True",
        "httpx<1,>=0.27",
        "False False",
    ]

"""The TypeScript client (clients/typescript, `@memoryhub/client`) against a live MemoryHub: each
of its `node --test` files runs here, one pytest test per file, with a fresh live server (uvicorn
on loopback, the suite's real PostgreSQL), an admin key, and a control server for what only
this process can set up (more agents and keys, settings, a flaky proxy, a look at the
database: tests/support/harness_control.py). A file fails here when one of its Node tests
fails; its output is the failure message.

The package is built once (`npm run build` and the tests' build) whenever its sources change.
It needs Node ≥ 20 and `npm ci` in clients/typescript (`make install` does both).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.factories import make_agent, make_key, make_tenant
from tests.support.harness_control import HarnessControl
from tests.support.live_server import asgi_server  # noqa: F401 - the fixture

PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "typescript"
NODE_TESTS = sorted(path.name for path in (PACKAGE / "test").glob("*.test.ts"))
BUILD_INPUTS = ("src", "test", "scripts", "package.json", "tsconfig.json", "tsconfig.test.json")
STAMP = PACKAGE / ".test-build" / ".sources"


def _sources_digest() -> str:
    digest = hashlib.sha256()
    for name in BUILD_INPUTS:
        root = PACKAGE / name
        for path in sorted([root] if root.is_file() else root.rglob("*")):
            if path.is_file():
                digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0")
                digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


@pytest.fixture(scope="session")
def built_package():
    """The package and its tests compiled (dist/, .test-build/), once per change of sources;
    one builder at a time across xdist workers."""
    if shutil.which("npm") is None or not (PACKAGE / "node_modules").is_dir():
        pytest.skip("Node dependencies not installed: `npm ci` in clients/typescript")
    with open(PACKAGE / "node_modules" / ".memoryhub-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = _sources_digest()
        if not STAMP.is_file() or STAMP.read_text() != digest:
            for script in ("build", "build:test"):
                built = subprocess.run(
                    ["npm", "run", "--silent", script],
                    cwd=PACKAGE,
                    capture_output=True,
                    text=True,
                )
                assert built.returncode == 0, f"npm run {script}:\n{built.stdout}{built.stderr}"
            STAMP.write_text(digest)
    return PACKAGE


@pytest.mark.parametrize("test_file", NODE_TESTS)
def test_typescript_client(test_file, built_package, asgi_server, settings, monkeypatch):  # noqa: F811
    agent = make_agent(make_tenant("acme"), "support-bot")
    _, key = make_key(agent, scopes=["read", "write", "admin"])
    with HarnessControl.running(asgi_server, settings, monkeypatch) as control:
        compiled = Path(".test-build") / "test" / test_file.replace(".ts", ".js")
        env = {
            **os.environ,
            "MEMORYHUB_URL": asgi_server,
            "MEMORYHUB_API_KEY": key,
            "MEMORYHUB_TEST_CONTROL": control.url,
            "NO_COLOR": "1",
        }
        ran = subprocess.run(
            ["node", "--test", "--test-reporter=spec", str(compiled)],
            cwd=built_package,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    print(ran.stdout[-5000:])  # the Node tests' report (pytest -rP shows it)
    if ran.returncode != 0:
        pytest.fail(f"node --test {compiled} failed:\n{ran.stdout[-20000:]}{ran.stderr[-5000:]}")

"""The README's five-minute tour, run as a newcomer runs it: `seed_demo` (what `make run` calls)
prints the key as an `export MEMORYHUB_KEY=…` line, which is pasted into a shell; then each
`<!-- tour: curl -->` block is pasted in turn (one bash session, as written), and the
`<!-- tour: python -->` block runs in a fresh Python. Against a live server on the suite's
PostgreSQL. Each output is checked, and so is every example output the README shows next to a
block (its fragments between "…" must appear in what the block printed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timedelta
from io import StringIO
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.db import connection

from tests.support.live_server import asgi_server  # noqa: F401 - the fixture

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "@@tour-block@@"
BLOCK = re.compile(
    r"<!-- tour: (curl|python) -->\n```(?:sh|python)\n(.*?)\n```(?:\n```\n(.*?)\n```)?", re.S
)

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")


def tour() -> list[tuple[str, str, str | None]]:
    """(language, code, the example output shown after it) of each tour block, in order."""
    return [(m.group(1), m.group(2), m.group(3)) for m in BLOCK.finditer(README.read_text())]


@pytest.fixture
def newcomer(asgi_server):  # noqa: F811 - the imported fixture
    """The shell lines a newcomer has after `make run`: the server's URL and the printed key."""
    out = StringIO()
    call_command("seed_demo", stdout=out)
    (export,) = [line.strip() for line in out.getvalue().splitlines() if "MEMORYHUB_KEY=" in line]
    assert re.fullmatch(r"export MEMORYHUB_KEY=mh_[A-Za-z0-9]+", export)
    return {"url": asgi_server, "export": export, "key": export.split("=", 1)[1]}


def shows(example: str | None, actual: str) -> None:
    """Every fragment of a README example output (split at "…") is in the actual output."""
    if example is None:
        return
    for fragment in example.split("…"):
        assert fragment in actual, f"the README shows {fragment!r}, the block printed {actual!r}"


def test_the_curl_tour_runs_as_written(newcomer):
    blocks = [(code, example) for lang, code, example in tour() if lang == "curl"]
    assert len(blocks) == 7
    script = [f"export MEMORYHUB_URL={newcomer['url']}", newcomer["export"]]
    for code, _ in blocks:
        script += [f"echo {MARK}", code, "echo"]
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")},
    )
    assert done.returncode == 0, done.stderr
    outputs = [part.strip() for part in done.stdout.split(MARK)[1:]]
    bodies = [json.loads(part) for part in outputs]
    assert all(body["ok"] for body in bodies), outputs
    for (_, example), output in zip(blocks, outputs, strict=True):
        shows(example, output)
    stored, second, recalled, found, others, hydrated, handed = bodies
    assert (stored["message"], stored["version"], stored["memory"]["key"]) == ("Ok", 1, "diet")
    assert stored["memory"]["subject_id"] == "alice" and second["memory"]["tags"] == ["billing"]
    assert recalled["memory"]["text"] == "Alice is vegetarian and allergic to peanuts."
    texts = [hit["data"]["text"] for hit in found["memories"]]
    assert "Alice is vegetarian and allergic to peanuts." in texts
    assert not [t for t in texts if "Bob" in t]  # alice's request never sees bob's
    assert not [hit for hit in others["memories"] if "Alice" in hit["data"]["text"]]
    assert "Alice is vegetarian and allergic to peanuts." in hydrated["markdown"]
    assert "Bob" not in hydrated["markdown"]
    assert handed["accepted"] == 2 and handed["extraction"]["state"] == "disabled"


def test_the_python_tour_runs_as_written_and_prints_what_was_stored(newcomer):
    (code,) = [code for lang, code, _ in tour() if lang == "python"]
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MEMORYHUB_URL": newcomer["url"], "MEMORYHUB_KEY": newcomer["key"]},
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Bob prefers short answers."  # recalled by key
    assert re.fullmatch(r"0\.\d\d Bob (prefers short answers|is learning Portuguese)\.", lines[1])
    # The list loop prints what was stored, the demo's fact about bob too, never alice's.
    assert "style Bob prefers short answers." in lines
    assert "None Bob is learning Portuguese." in lines
    assert "pref.language Bob prefers answers in English, short and to the point." in lines
    assert not [line for line in lines if "Alice" in line]
    assert lines[-1] == "1 disabled"


MODEL_BLOCK = re.compile(r"<!-- model: sh -->\n```sh\n(.*?)\n```(?:\n```\n(.*?)\n```)?", re.S)


def test_the_memory_model_examples_run_as_written(newcomer):
    """The README's three memory-model examples, pasted after the tour's first lines (its `API`
    and `AUTH`) in one bash session: the commands they run (`manage.py create_api_key`,
    `agent_policy`) reach the suite's database as `make run`'s do the served one."""
    blocks = [(m.group(1), m.group(2)) for m in MODEL_BLOCK.finditer(README.read_text())]
    assert len(blocks) == 3
    first = next(code for lang, code, _ in tour() if lang == "curl")
    setup = [line for line in first.splitlines() if line.startswith(("API=", "AUTH="))]
    script = [f"export MEMORYHUB_URL={newcomer['url']}", newcomer["export"], *setup]
    for code, _ in blocks:
        script += [f"echo {MARK}", code, "echo"]
    db = connection.settings_dict
    url = "postgresql://{}@{}:{}/{}".format(
        db["USER"], quote(db["HOST"], safe=""), db["PORT"], db["NAME"]
    )
    done = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", "\n".join(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=README.parent,
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "memoryhub.settings"},
    )
    assert done.returncode == 0, done.stderr
    outputs = [part.strip() for part in done.stdout.split(MARK)[1:]]
    for (_, example), output in zip(blocks, outputs, strict=True):
        shows(example, output)
    profile, shared, retention = (
        [json.loads(line) for line in output.splitlines() if line.strip()] for output in outputs
    )
    created, replaced = profile
    assert (created["action"], replaced["action"]) == ("created", "replaced")
    assert replaced["memory_id"] == created["memory_id"] and replaced["version"] == 2
    assert replaced["memory"]["data"] == {"name": "Alice", "location": "Porto"}
    stored, for_alice, for_bob = shared
    assert stored["memory"]["scope"] == "user" and stored["memory"]["agent"] is None
    hit = for_alice["memories"][0]
    assert (hit["id"], hit["source"]) == (stored["memory_id"], "user")
    assert not [h for h in for_bob["memories"] if "Alice" in h["data"]["text"]]
    policy, daily = retention
    assert policy["max_retention"] == {"daily": "1d"}
    memory = daily["memory"]
    lifetime = datetime.fromisoformat(memory["expires_at"]) - datetime.fromisoformat(
        memory["updated_at"]
    )
    assert lifetime == timedelta(hours=24)  # asked for 7 days, capped by the policy

"""The django-q2 cluster: its settings (docs/operations.md#background-jobs) and `serve` starting
it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command

from memoryhub import supervisor
from tests.support.commands import BASE_DIR, command_env


def test_cluster_settings():
    q = settings.Q_CLUSTER
    assert q["timeout"] < q["retry"]  # or a long job would be handed out again while it runs
    assert isinstance(q["max_attempts"], int) and 0 < q["max_attempts"] <= 5
    assert q["catch_up"] is False  # missed schedules are not replayed after downtime
    assert q["sync"] is True  # tests run tasks in-process
    assert q["orm"] == "default" and "redis" not in q  # the ORM broker on the same PostgreSQL


def cluster_settings(**env: str) -> dict:
    """Q_CLUSTER as a process outside the test run computes it from its environment."""
    script = "import json, memoryhub.settings as s; print(json.dumps(s.Q_CLUSTER))"
    environment = {k: v for k, v in command_env().items() if k != "REDIS_URL"}
    environment.update(DJANGO_SETTINGS_MODULE="memoryhub.settings", **env)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=BASE_DIR,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_outside_tests_the_cluster_is_asynchronous_on_the_orm_broker():
    q = cluster_settings()
    assert (q["sync"], q["orm"], q["catch_up"]) == (False, "default", False)
    assert q["timeout"] < q["retry"]


def test_redis_url_switches_the_broker():
    q = cluster_settings(REDIS_URL="redis://127.0.0.1:6379/0")
    assert "orm" not in q
    assert q["redis"] == "redis://127.0.0.1:6379/0"
    assert q["timeout"] < q["retry"] and q["catch_up"] is False


def test_serve_starts_the_cluster_beside_uvicorn():
    cluster, web = supervisor.processes(host="127.0.0.1", port=8123, workers=2)

    assert cluster == [sys.executable, "manage.py", "qcluster"]
    assert web[:4] == [sys.executable, "-m", "uvicorn", "memoryhub.asgi:application"]
    assert web[web.index("--port") + 1] == "8123" and web[web.index("--workers") + 1] == "2"
    assert len(supervisor.processes(host="127.0.0.1", port=8000, workers=1, cluster=False)) == 1


class FakeProcess:
    def __init__(self, command, env):
        self.command, self.env = command, env
        self.signals: list[int] = []

    def wait(self, timeout=None):
        return 0

    def poll(self):
        return None

    def send_signal(self, signum):
        self.signals.append(signum)


def test_serve_command_spawns_both_and_stops_both(monkeypatch, db):  # serve reads migrations
    started: list[FakeProcess] = []

    def popen(command, env, **options):
        started.append(FakeProcess(command, env))
        return started[-1]

    monkeypatch.setattr(supervisor.subprocess, "Popen", popen)
    monkeypatch.setattr(supervisor.signal, "signal", lambda *args: None)  # leave pytest's handlers

    call_command("serve", "--port", "8124")

    assert [p.command for p in started] == supervisor.processes(
        host="127.0.0.1", port=8124, workers=supervisor.default_workers()
    )
    # The web server returning (here: at once) stops the cluster too.
    assert [p.signals for p in started] == [[signal.SIGTERM], [signal.SIGTERM]]


def test_serve_without_the_cluster(monkeypatch, db):
    started: list[list[str]] = []

    def popen(command, env, **options):
        started.append(command)
        return FakeProcess(command, env)

    monkeypatch.setattr(supervisor.subprocess, "Popen", popen)
    monkeypatch.setattr(supervisor.signal, "signal", lambda *args: None)

    call_command("serve", "--no-cluster")

    assert [command[2] for command in started] == ["uvicorn"]

"""`manage.py check` and the database server: PostgreSQL under 16 or pgvector under 0.8 is an
error, a node that may open more connections than the server allows a warning, and the test
server itself passes. The server's report is faked where a test needs an old one (the function
that reads it, not our storage)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from memoryhub import checks
from memoryhub.connections import node_connections
from tests.support.commands import BASE_DIR, command_env

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_workers(monkeypatch):
    """This node's web processes: two, whatever the machine's cores."""
    monkeypatch.setenv("WEB_CONCURRENCY", "2")


def _reporting(monkeypatch, **fake: str | None) -> None:
    real = checks.server_facts()
    monkeypatch.setattr(checks, "server_facts", lambda: {**real, **fake})


def _ids(messages) -> list[str]:
    return [m.id for m in messages]


def test_the_test_server_passes(two_workers):
    facts = checks.server_facts()
    assert int(facts["server_version_num"]) >= 160000 and facts["vector"]
    assert checks.database_server(None, databases=["default"]) == []


def test_postgresql_15_is_an_error(monkeypatch, two_workers):
    _reporting(monkeypatch, server_version="15.8", server_version_num="150008")
    (error,) = checks.database_server(None, databases=["default"])
    assert error.id == "memoryhub.E002" and "PostgreSQL 15.8 is too old" in error.msg
    with pytest.raises(SystemCheckError, match=r"memoryhub\.E002"):
        call_command("check", "--database", "default")


@pytest.mark.parametrize(("vector", "said"), [("0.7.4", "pgvector 0.7.4"), (None, "no pgvector")])
def test_pgvector_older_than_0_8_or_missing_is_an_error(monkeypatch, two_workers, vector, said):
    _reporting(monkeypatch, vector=vector)
    (error,) = checks.database_server(None, databases=["default"])
    assert error.id == "memoryhub.E003" and f"The server has {said}" in error.msg


def test_pgvector_0_8_and_later_pass(monkeypatch, two_workers):
    for vector in ("0.8.0", "0.10.1", "1.0"):
        _reporting(monkeypatch, vector=vector)
        assert checks.database_server(None, databases=["default"]) == []


def test_a_budget_over_what_the_server_allows_is_a_warning(monkeypatch, settings, two_workers):
    settings.MEMORYHUB_DB_CONNECTIONS = 400
    _reporting(
        monkeypatch,
        max_connections="300",
        superuser_reserved_connections="3",
        reserved_connections="2",
    )
    (warning,) = checks.database_server(None, databases=["default"])
    assert warning.id == "memoryhub.W002"
    # 400 for the web processes, 2 listening, 2 cluster workers + 3 of its own.
    assert "This node may open 407 database connections" in warning.msg
    assert "The server allows 295 (max_connections 300" in warning.msg
    # The same node fits a server that allows 407.
    _reporting(
        monkeypatch,
        max_connections="410",
        superuser_reserved_connections="3",
        reserved_connections="0",
    )
    assert checks.database_server(None, databases=["default"]) == []


def test_only_where_the_database_is_checked(monkeypatch, two_workers):
    """Django checks databases when asked (`migrate`, `--database`): a plain check of settings
    alone reads nothing from the server."""
    _reporting(monkeypatch, server_version="15.8", server_version_num="150008")
    assert checks.database_server(None, databases=None) == []


def test_a_node_counts_its_pools_listeners_and_cluster():
    # One process per core on 64 cores: each keeps its floor of 4 connections, over the budget.
    assert node_connections(budget=160, workers=64, cluster_workers=2) == {
        "workers": 64,
        "per_process": 4,
        "web": 256,
        "listening": 64,
        "cluster": 5,
        "total": 325,
    }
    # Eight: 20 connections each, the budget's 160.
    assert node_connections(budget=160, workers=8, cluster_workers=2)["total"] == 160 + 8 + 5


def test_plain_check_against_an_external_server_warns_on_an_oversized_node():
    """A plain `manage.py check` with DATABASE_URL checks that server (this test's)."""
    base = command_env() | {"WEB_CONCURRENCY": "300", "MEMORYHUB_DB_CONNECTIONS": "160"}
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=BASE_DIR,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr  # a warning, not an error
    assert "memoryhub.W002" in done.stderr
    assert "This node may open 1505 database connections" in done.stderr

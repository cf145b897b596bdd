"""Fail fast while the database is down (memoryhub/db_outage.py), in this process.

The database "goes down" by pointing the connection at a socket directory that does not exist
(as the health-check test does); the outage watcher's probe then fails like it would against a
killed server, and succeeds again once the setting is restored. The real thing (a killed
embedded PostgreSQL under `serve`) is tests/foundation/test_serve_supervision.py.
"""

from __future__ import annotations

import time

import psycopg
import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from django.test import Client

from memoryhub import db_outage
from memoryhub.db_outage import ReportingConnection

UNAVAILABLE = {
    "ok": False,
    "error": {
        "code": "BACKEND_UNAVAILABLE",
        "message": "The database is unavailable",
        "details": {},
    },
}


def until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)  # polling a condition with a deadline


@pytest.fixture
def outage(settings, transactional_db):
    """Yields a function that takes the database away; it comes back at teardown."""
    settings.MEMORYHUB_DB_FAIL_FAST = True
    original = connection.settings_dict["HOST"]

    def go_down() -> None:
        connection.close()
        connection.settings_dict["HOST"] = "/nonexistent-socket-dir"

    def come_back() -> None:
        connection.settings_dict["HOST"] = original
        until(lambda: not db_outage.is_down(), "the watcher to see the database back")

    try:
        yield go_down, come_back
    finally:
        connection.settings_dict["HOST"] = original
        until(lambda: not db_outage.is_down(), "the watcher to finish")
        connection.close()


@pytest.fixture
def connection_attempts(monkeypatch):
    """Every connection Django opens (or tries to), in any thread: the list of their hosts.
    The attempts still go to the database; the list only records them."""
    attempts: list[str] = []
    open_connection = DatabaseWrapper.get_new_connection

    def recorded(self, conn_params):
        attempts.append(conn_params.get("host"))
        return open_connection(self, conn_params)

    monkeypatch.setattr(DatabaseWrapper, "get_new_connection", recorded)
    return attempts


# No test transaction: the connection is closed (as an outage would) in the middle.
@pytest.mark.django_db(transaction=True)
def test_while_the_database_is_down_every_request_is_a_quick_503(
    outage, api_key, connection_attempts
):
    go_down, come_back = outage
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    assert client.get("/api/v1/whoami").status_code == 200

    go_down()
    # The first request meets the outage itself (a failed connection), and reports it.
    first = client.get("/api/v1/whoami")
    assert first.status_code == 503
    assert first.json() == UNAVAILABLE
    assert connection_attempts[-1] == "/nonexistent-socket-dir"  # it tried, and failed
    until(db_outage.is_down, "the watcher to call the database down")

    # Quick because nothing waits on the database: no request even tries a connection (one
    # that did would wait for the server to answer, however long that takes).
    tried = len(connection_attempts)
    api = client.post("/api/v1/memories", {"text": "x"}, content_type="application/json")
    health = client.get("/healthz")
    console = client.get("/console/")
    assert connection_attempts[tried:] == []
    assert (api.status_code, api.json(), api["Retry-After"]) == (503, UNAVAILABLE, "5")
    assert (health.status_code, health.json(), health["Retry-After"]) == (
        503,
        {"ok": False, "database": "unavailable"},
        "5",
    )
    assert console.status_code == 503 and console["Retry-After"] == "5"
    assert "database is unavailable" in console.content.decode()
    # Static files need no database.
    assert client.get("/static/console.css").status_code == 200

    come_back()
    assert client.get("/api/v1/whoami").status_code == 200
    assert client.get("/healthz").json() == {"ok": True, "database": "ok"}


def test_a_failed_pool_connection_reports_the_outage(outage):
    go_down, come_back = outage
    go_down()
    with pytest.raises(psycopg.OperationalError):
        ReportingConnection.connect(host="/nonexistent-socket-dir", dbname="x", connect_timeout=2)
    until(db_outage.is_down, "the report to be checked")
    come_back()


def test_a_stale_connection_is_no_outage(settings, db):
    """A report while the database answers (one broken connection) changes nothing."""
    settings.MEMORYHUB_DB_FAIL_FAST = True
    db_outage.report()
    until(lambda: not db_outage.watch._watching, "the watcher to finish")
    assert not db_outage.is_down()


def test_off_in_tests_by_default(settings):
    assert settings.MEMORYHUB_DB_FAIL_FAST is False
    db_outage.report()
    assert not db_outage.watch._watching and not db_outage.is_down()

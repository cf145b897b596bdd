"""`serve` refuses to start on a database with unapplied migrations: one line naming them and
saying how to apply them, a non-zero exit, nothing started (docs/operations.md#upgrading)."""

from __future__ import annotations

import io

import pytest
from django.db import OperationalError, connection
from django.db.migrations.recorder import MigrationRecorder

from memoryhub.management.commands import serve
from tests.support.commands import start_command


@pytest.mark.django_db(transaction=True)
def test_serve_refuses_a_database_with_an_unapplied_migration():
    recorder = MigrationRecorder(connection)
    recorder.record_unapplied("sessions", "0001_initial")  # committed: the command sees it
    try:
        process = start_command("serve", "--port", "1")
        stdout, stderr = process.communicate(timeout=120)
    finally:
        recorder.record_applied("sessions", "0001_initial")

    assert process.returncode == 1
    assert stderr.strip().splitlines()[-1] == (
        "CommandError: the database has unapplied migrations (sessions.0001_initial): "
        "run `python manage.py migrate` first"
    )
    assert "MemoryHub ready" not in stdout


def test_an_unreachable_database_is_said_and_no_reason_to_refuse(monkeypatch):
    """The web processes answer 503 until the database is back, as when it goes away later."""

    def unreachable():
        raise OperationalError("connection refused\nis the server running?")

    monkeypatch.setattr(serve, "unapplied_migrations", unreachable)
    err = io.StringIO()
    serve.Command(stderr=err).check_schema()  # no CommandError
    assert err.getvalue() == "could not check the migrations: connection refused\n"

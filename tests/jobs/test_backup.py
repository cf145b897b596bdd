"""The scheduled backup: its schedule row from the settings, a run that writes a backup and keeps
MEMORYHUB_BACKUP_KEEP, the last-success metric, and the `backup.failed` event of a failed run."""

from __future__ import annotations

import json
import re
import stat
from datetime import timedelta
from pathlib import Path

import pytest
import time_machine
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import Schedule
from django_q.scheduler import scheduler
from django_q.signals import post_spawn

from memories.jobs.backup import SCHEDULE_NAME, backup_schedule_sync
from memories.models import Event, JobRun
from memories.tasks import run_job
from memoryhub.backups import BackupError
from tests.support.jobs import NOW

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-for-backups"
METRIC = "memoryhub_backup_last_success_timestamp_seconds"
# Older than any backup written today: names sort by time.
OLD = [f"memoryhub-2020010{day}T030000Z" for day in range(1, 6)]


@pytest.fixture
def backup_dir(tmp_path, settings):
    directory = tmp_path / "backups"
    directory.mkdir()
    settings.MEMORYHUB_BACKUP_DIR = str(directory)
    settings.MEMORYHUB_BACKUP_SCHEDULE = "daily"
    settings.MEMORYHUB_BACKUP_KEEP = 3
    settings.MEMORYHUB_METRICS_TOKEN = TOKEN
    return directory


@pytest.fixture
def failing_pg_dump(tmp_path, settings):
    """A pg_dump of the server's version that starts its archive, then fails (a full disk)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    major = connection.cursor().connection.info.server_version // 10000
    script = bin_dir / "pg_dump"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--version" ]; then echo "pg_dump (PostgreSQL) {major}.0"; exit 0; fi\n'
        'for a in "$@"; do case "$a" in --file=*) echo started > "${a#--file=}";; esac; done\n'
        'echo "pg_dump: error: could not write to output file: No space left on device" >&2\n'
        "exit 1\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def seed(directory: Path, names: list[str]) -> None:
    for name in names:
        (directory / f"{name}.dump").write_bytes(b"PGDMP")
        (directory / f"{name}.manifest.json").write_text("{}")


def metric(client) -> float | None:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    match = re.search(rf"^{METRIC} (\S+)$", response.content.decode(), re.M)
    return float(match[1]) if match else None


def test_a_scheduled_run_writes_a_backup_keeps_the_newest_and_sets_the_metric(
    backup_dir, client, settings, failing_pg_dump
):
    seed(backup_dir, OLD)
    in_progress = backup_dir / "memoryhub-20200101T000000Z.dump.partial"
    in_progress.write_bytes(b"PGDMP")
    backup_schedule_sync()
    assert metric(client) == 0  # on, none yet
    later = timezone.now() + timedelta(days=1)
    Schedule.objects.exclude(name=SCHEDULE_NAME).update(next_run=later)  # only the backup due

    # Two clusters look: the first takes the due row (django-q2 locks it and moves its next run
    # a period on; in the test settings the task runs right here), the second finds none due.
    scheduler()
    scheduler()

    run = JobRun.objects.get(job="backup")
    assert Schedule.objects.get(name=SCHEDULE_NAME).next_run > timezone.now()
    assert (run.job, run.trigger, run.status, run.tenant_id) == ("backup", "schedule", "ok", None)
    manifests = sorted(p.name for p in backup_dir.glob("*.manifest.json"))
    made = manifests[-1]
    assert manifests == [f"{OLD[3]}.manifest.json", f"{OLD[4]}.manifest.json", made]
    assert sorted(p.name for p in backup_dir.glob("*.dump")) == [
        f"{OLD[3]}.dump",
        f"{OLD[4]}.dump",
        made.replace(".manifest.json", ".dump"),
    ]
    assert in_progress.exists()  # a backup being written is never pruned
    manifest = json.loads((backup_dir / made).read_text())
    assert manifest["tables"]["memories_memory"] >= 0
    assert run.counts == {"backups_kept": 3, "backups_deleted": 3}
    success = metric(client)
    assert success == run.finished_at.timestamp()

    # A failing run changes neither the metric nor the files, and is recorded as failed.
    settings.MEMORYHUB_PG_BIN_DIR = str(failing_pg_dump)
    # A minute on: backups are named by the second, and a second one in the same second is
    # refused before pg_dump runs.
    with (
        time_machine.travel(timezone.now() + timedelta(minutes=1)),
        pytest.raises(BackupError, match="No space left on device"),
    ):
        run_job("backup")
    failed = JobRun.objects.filter(job="backup").latest("started_at")
    assert failed.status == "failed" and failed.error.startswith("BackupError")
    assert metric(client) == success
    assert sorted(p.name for p in backup_dir.glob("*.manifest.json")) == manifests
    assert sorted(p.name for p in backup_dir.glob("*.partial")) == [in_progress.name]


@pytest.mark.parametrize("cause", ["pg_dump fails", "the directory is a file"])
def test_a_failed_run_is_an_event_in_every_tenant_s_feed(
    cause, backup_dir, failing_pg_dump, settings, api_client, tenant, other_tenant, client
):
    if cause == "pg_dump fails":
        settings.MEMORYHUB_PG_BIN_DIR = str(failing_pg_dump)
    else:
        taken = backup_dir / "taken"
        taken.write_text("not a directory")
        settings.MEMORYHUB_BACKUP_DIR = str(taken)
    backup_schedule_sync()

    with pytest.raises(Exception) as raised:  # noqa: PT011 - each cause its own class
        run_job("backup", now=NOW)

    run = JobRun.objects.get(job="backup")
    assert run.status == "failed"
    assert run.error.startswith(type(raised.value).__name__)
    assert metric(client) == 0
    body = api_client.get("/api/v1/events", {"types": "backup.failed"}).json()
    assert [(e["type"], e["agent"], e["occurred_at"], e["data"]) for e in body["events"]] == [
        (
            "backup.failed",
            None,
            "2026-06-01T12:00:00.000000Z",
            {"job": "backup", "error_class": type(raised.value).__name__, "last_success_at": None},
        )
    ]
    assert Event.objects.filter(tenant=other_tenant, type="backup.failed").count() == 1
    assert list(backup_dir.glob("*.dump*")) == []  # the failed run left no partial file


def test_the_schedule_follows_the_settings(backup_dir, settings, client, monkeypatch):
    schedule = backup_schedule_sync(now=NOW)
    assert (schedule.name, schedule.func, schedule.args, schedule.schedule_type) == (
        SCHEDULE_NAME,
        "memories.tasks.run_job",
        "'backup'",
        "D",
    )
    assert (schedule.repeats, schedule.next_run) == (-1, NOW)  # the first backup at once

    settings.MEMORYHUB_BACKUP_SCHEDULE = "6h"
    monkeypatch.setattr(Conf, "SYNC", False)  # as in a cluster: a worker starting syncs it
    post_spawn.send(sender="django_q", proc_name="Process-1:1")
    changed = Schedule.objects.get(name=SCHEDULE_NAME)  # changed in place: still one row
    assert (changed.pk, changed.schedule_type, changed.minutes) == (schedule.pk, "I", 360)

    call_command("migrate", verbosity=0)  # migrate syncs it too: nothing to change
    assert Schedule.objects.filter(name=SCHEDULE_NAME).count() == 1

    settings.MEMORYHUB_BACKUP_DIR = ""
    call_command("migrate", verbosity=0)
    assert not Schedule.objects.filter(name=SCHEDULE_NAME).exists()
    assert metric(client) is None  # off: no series at all


def test_a_new_period_moves_a_far_next_run_closer(backup_dir, settings):
    settings.MEMORYHUB_BACKUP_SCHEDULE = "weekly"
    backup_schedule_sync(now=NOW)
    Schedule.objects.filter(name=SCHEDULE_NAME).update(next_run=NOW + timedelta(days=6))
    settings.MEMORYHUB_BACKUP_SCHEDULE = "hourly"
    schedule = backup_schedule_sync(now=NOW)
    assert (schedule.schedule_type, schedule.next_run) == ("H", NOW + timedelta(hours=1))


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("MEMORYHUB_BACKUP_SCHEDULE", "fortnightly", "hourly, daily, weekly or a duration"),
        ("MEMORYHUB_BACKUP_SCHEDULE", "90s", "whole number of minutes"),
        ("MEMORYHUB_BACKUP_KEEP", 0, "MEMORYHUB_BACKUP_KEEP must be 1 or more"),
    ],
)
def test_bad_settings_stop_the_sync_with_their_name(backup_dir, settings, name, value, message):
    setattr(settings, name, value)
    with pytest.raises(ImproperlyConfigured, match=message):
        backup_schedule_sync(now=NOW)
    assert not Schedule.objects.filter(name=SCHEDULE_NAME).exists()

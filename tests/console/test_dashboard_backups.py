"""The dashboard's last backup: its age while scheduled backups are on, a warning past two
periods or while none has succeeded, nothing when they are off; shown to admins."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from memories.jobs.backup import backup_schedule_sync
from memories.models import JobRun

pytestmark = pytest.mark.django_db

T = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def backups_on(settings, tmp_path):
    settings.MEMORYHUB_BACKUP_DIR = str(tmp_path)
    settings.MEMORYHUB_BACKUP_SCHEDULE = "daily"
    backup_schedule_sync(now=T)


def backup_run(*, hours_ago: float, status: str = "ok") -> JobRun:
    finished = T - timedelta(hours=hours_ago)
    return JobRun.objects.create(
        job="backup",
        status=status,
        started_at=finished - timedelta(seconds=20),
        finished_at=finished,
    )


def dashboard(client, **headers) -> str:
    with time_machine.travel(T, tick=False):
        response = client.get("/console/", **headers)
    assert response.status_code == 200
    return response.content.decode()


def last_backup(html: str) -> str | None:
    """The stat's text, whitespace folded (None: no stat)."""
    match = re.search(r"<a class=\"stat[^\"]*\"[^>]*data-last-backup>(.*?)</a>", html, re.S)
    if match is None:
        return None
    return " ".join(re.sub(r"<[^>]+>", " ", match[1]).split())


def test_the_last_backup_s_age(backups_on, owner_client):
    backup_run(hours_ago=30, status="ok")
    backup_run(hours_ago=3, status="ok")
    backup_run(hours_ago=1, status="failed")  # a failure after it: the age is the success's

    html = dashboard(owner_client)

    assert last_backup(html) == "3 hours ago Last backup · scheduled every 1d"
    assert "data-backup-overdue" not in html
    assert 'class="stat stat-attention" href="/console/jobs/" data-last-backup' not in html


@pytest.mark.parametrize(("hours_ago", "overdue"), [(47, False), (49, True)])
def test_a_warning_past_two_periods(backups_on, owner_client, hours_ago, overdue):
    backup_run(hours_ago=hours_ago)

    html = dashboard(owner_client)

    assert ("data-backup-overdue" in html) is overdue
    if overdue:
        assert "The last successful backup was 2\xa0days, 1\xa0hour ago" in html
        assert 'class="stat stat-attention" href="/console/jobs/" data-last-backup' in html


def test_a_warning_while_none_has_succeeded(backups_on, owner_client):
    backup_run(hours_ago=1, status="failed")

    html = dashboard(owner_client, HTTP_HX_REQUEST="true")  # the refreshed fragment too

    assert 'id="dashboard-body"' in html and "<html" not in html
    assert last_backup(html) == "Never Last backup · scheduled every 1d"
    assert "Scheduled backups are on, but none has succeeded yet." in html


def test_nothing_while_backups_are_off(owner_client, settings):
    settings.MEMORYHUB_BACKUP_DIR = ""
    backup_schedule_sync(now=T)
    backup_run(hours_ago=100)  # a backup from when they were on

    html = dashboard(owner_client)

    assert last_backup(html) is None
    assert "data-backup-overdue" not in html


def test_only_admins_see_it(backups_on, viewer_client, reviewer_client):
    for client in (viewer_client, reviewer_client):
        html = dashboard(client)
        assert last_backup(html) is None
        assert "data-backup-overdue" not in html

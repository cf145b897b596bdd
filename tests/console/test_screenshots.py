"""`python manage.py screenshots`: the demo's thirty days of history (what the pictures show)
and the pictures themselves, taken by the system Chromium from a live server."""

from __future__ import annotations

import os
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from accounts.models import Agent
from accounts.services import operator_password_reset
from memories.console import memory_selectors as sel
from memories.console import trends
from memories.demo_history import DAYS, seed_history
from memories.management.commands.screenshots import CHROMIUM, Command
from memories.models import DailyReads, ExtractionRun, Memory, RunState, Status

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop, ORM between


def demo_agent() -> Agent:
    call_command("seed_demo", stdout=StringIO())
    return Agent.objects.get(tenant__slug="demo", slug="demo-agent")


@pytest.mark.django_db
def test_the_history_fills_every_chart_of_the_last_thirty_days():
    agent = demo_agent()
    now = timezone.now()
    seed_history(tenant=agent.tenant, agent=agent, now=now)
    tenant = agent.tenant
    days = trends._window(now)
    reads = trends.reads_per_day(tenant=tenant, days=days)
    assert sum(1 for n in reads if n) >= DAYS - 2  # read on (nearly) every past day
    assert sum(1 for n in trends.writes_per_day(tenant=tenant, days=days) if n) >= DAYS - 2
    runs = ExtractionRun.objects.for_tenant(tenant)
    assert runs.count() >= 5 and set(runs.values_list("state", flat=True)) == {RunState.DONE}
    assert Memory.objects.for_tenant(tenant).filter(status=Status.TOMBSTONED).exists()
    pending = Memory.objects.for_tenant(tenant).filter(review_state="pending")
    assert pending.count() >= 2 and set(pending.values_list("review_reason", flat=True)) == {
        "inferred"
    }
    live = sel.dashboard_stats(tenant=tenant)["by_category"]
    charts = trends.dashboard_charts(tenant=tenant, live_now=live, now=now)
    assert [c.empty for c in charts] == [False] * 4
    oldest = Memory.objects.for_tenant(tenant).order_by("created_at").first().created_at
    assert (now.date() - oldest.date()).days == DAYS - 1  # the window's first day
    assert DailyReads.objects.for_tenant(tenant).count() >= DAYS - 2


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed")
def test_the_pages_are_photographed_as_png(live_server, tmp_path):
    agent = demo_agent()
    operator_password_reset(email="admin@example.com", password="a-demo-password")
    pending = Memory.objects.get(tenant=agent.tenant, review_state="pending")
    wanted = {"dashboard": "/console/", "memory-pending": f"/console/memories/{pending.pk}/"}
    out = StringIO()
    command = Command(stdout=out)
    command.shoot(live_server.url, "a-demo-password", wanted, tmp_path)
    for name in wanted:
        data = (tmp_path / f"{name}.png").read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and 10_000 < len(data) < 400_000
    assert "wrote" in out.getvalue()

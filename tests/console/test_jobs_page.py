"""The console Jobs page: scoped to the operator's tenant, `Run now` for admins only.

Scheduled runs cover every tenant; the page shows a tenant its share of their counts, its own
`Run now` runs in full, and nothing of another tenant's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memories.models import JobRun, Memory
from tests.factories import make_agent, make_operator
from tests.support.browser import CHROMIUM, browser, expect, new_page, shot  # noqa: F401
from tests.support.jobs import add_memories, ago

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def runs(tenant, other_tenant):
    """acme's own run, globex's own run, and a scheduled run over both, with telling numbers."""
    return {
        "own": JobRun.objects.create(
            job="prune_memories", trigger="console", tenant=tenant, status="ok",
            counts={"expired": 31415, "total": 31415},
        ),
        "other": JobRun.objects.create(
            job="reembed", trigger="console", tenant=other_tenant, status="failed",
            counts={"embedded": 77701}, error="IntegrityError: mem_globex_secret_row",
        ),
        "scheduled": JobRun.objects.create(
            job="prune_memories", trigger="schedule", status="ok",
            counts={"expired": 69137, "total": 69137},
            tenant_counts={
                str(tenant.pk): {"expired": 27182, "total": 27182},
                str(other_tenant.pk): {"expired": 41955, "total": 41955},
            },
        ),
        "failed_scheduled": JobRun.objects.create(
            job="purge_retention", trigger="schedule", status="failed",
            error="DataError: value of mem_globex_other_row out of range",
        ),
    }  # fmt: skip


def runs_section(body: str) -> str:
    return body[body.index('id="job-runs"') :]


def test_the_page_shows_own_runs_and_this_tenants_share_of_scheduled_ones(viewer_client, runs):
    body = viewer_client.get("/console/jobs/").content.decode()

    section = runs_section(body)
    assert section.count("<tr>") == 1 + 3  # header + own + the two scheduled runs
    assert "31415" in section and "27182" in section  # own counts, share of the scheduled run
    for leak in ("77701", "69137", "41955", "mem_globex_secret_row", "mem_globex_other_row"):
        assert leak not in body
    assert "DataError" in section  # a scheduled run's failure shows, without its message
    assert "acme only" in section and "all tenants" in section


def test_the_htmx_fragment_is_scoped_the_same_way(viewer_client, runs):
    body = viewer_client.get("/console/jobs/", **HX).content.decode()

    assert body.lstrip().startswith('<section class="card flush" id="job-runs">')
    assert "27182" in body and "69137" not in body and "77701" not in body


def test_the_other_tenant_sees_its_own_share(login, outsider, runs):
    body = login(outsider).get("/console/jobs/").content.decode()

    assert "41955" in body and "77701" in body
    assert "27182" not in body and "31415" not in body and "69137" not in body


def test_the_page_lists_the_newest_runs_the_tenant_may_see(tenant, other_tenant):
    """`JobRun.objects.visible_to` newest first, cut at JOB_RUNS_SHOWN, whatever the mix."""
    from memories.console.pages import JOB_RUNS_SHOWN, _job_runs

    owners = [tenant, None, other_tenant]
    created = [
        JobRun.objects.create(
            job="prune_memories", tenant=owners[i % 3], started_at=ago(minutes=i), status="ok"
        )
        for i in range(2 * JOB_RUNS_SHOWN)
    ]
    visible = [r.pk for r in created if r.tenant_id in (tenant.pk, None)]
    assert [r.pk for r in _job_runs(tenant)] == visible[:JOB_RUNS_SHOWN]


def last_prune_stat(body: str) -> str:
    start = body.index("Last prune")
    return body[start : body.index("</a>", start)]


def test_the_dashboards_last_prune_is_scoped_the_same_way(
    viewer_client, login, outsider, tenant, other_tenant
):
    JobRun.objects.create(
        job="prune_memories",
        trigger="schedule",
        status="ok",
        started_at=ago(hours=3),
        counts={"expired": 69137, "total": 69137},
        tenant_counts={
            str(tenant.pk): {"expired": 27182, "total": 27182},
            str(other_tenant.pk): {"expired": 41955, "total": 41955},
        },
    )
    JobRun.objects.create(
        job="prune_memories", trigger="console", tenant=other_tenant, status="failed",
        started_at=ago(hours=1), counts={"expired": 77701, "total": 77701},
    )  # fmt: skip

    # globex's run is the newest of all; acme sees the scheduled run, with acme's share only.
    body = viewer_client.get("/console/").content.decode()
    assert "27182 expired" in last_prune_stat(body) and "· ok ·" in last_prune_stat(body)
    for leak in ("77701", "69137", "41955", "failed"):
        assert leak not in body

    JobRun.objects.create(
        job="prune_memories", trigger="console", tenant=tenant, status="ok",
        started_at=ago(minutes=30), counts={"expired": 31415, "total": 31415},
    )  # fmt: skip
    body = viewer_client.get("/console/").content.decode()
    assert "31415 expired" in last_prune_stat(body)
    # globex's dashboard: its own run, not acme's newer one nor acme's share.
    body = login(outsider).get("/console/").content.decode()
    assert "77701 expired" in last_prune_stat(body) and "· failed ·" in last_prune_stat(body)
    for leak in ("31415", "27182", "69137"):
        assert leak not in body


def test_run_now_runs_the_job_for_the_operators_tenant_only(login, tenant, other_tenant, agent):
    admin = make_operator(tenant, "admin@acme.test", "admin").user
    add_memories(tenant, agent, 2, expires_at=ago(hours=1))
    add_memories(other_tenant, make_agent(other_tenant, "globex-bot"), 3, expires_at=ago(hours=1))

    response = login(admin).post("/console/jobs/run/", {"job": "prune_memories"})

    assert response.status_code == 302
    # Test settings run django-q2 synchronously: the run is recorded at once.
    run = JobRun.objects.get()
    assert (run.job, run.trigger, run.status, run.tenant_id) == (
        "prune_memories",
        "console",
        "ok",
        tenant.pk,
    )
    assert run.counts["expired"] == 2
    assert Memory.objects.filter(tenant=tenant, status="active").count() == 0
    assert Memory.objects.filter(tenant=other_tenant, status="active").count() == 3


@pytest.mark.parametrize("role", ["viewer", "reviewer"])
def test_only_admins_may_run_now(login, tenant, role):
    user = make_operator(tenant, f"{role}2@acme.test", role).user
    client = login(user)

    assert client.post("/console/jobs/run/", {"job": "prune_memories"}).status_code == 403
    assert not JobRun.objects.exists()
    page = client.get("/console/jobs/")
    assert page.status_code == 200
    assert ">Run now</button>" not in page.content.decode()


def test_admin_and_owner_see_run_now(login, tenant, owner):
    admin = make_operator(tenant, "admin@acme.test", "admin").user
    for user in (admin, owner):
        assert ">Run now</button>" in login(user).get("/console/jobs/").content.decode()


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed")
def test_run_now_in_the_browser(new_page, tenant, other_tenant, agent):  # noqa: F811
    make_operator(tenant, "admin@acme.test", "admin")
    add_memories(tenant, agent, 2, expires_at=ago(hours=1))
    add_memories(other_tenant, make_agent(other_tenant, "globex-bot"), 3, expires_at=ago(hours=1))
    JobRun.objects.create(
        job="prune_memories",
        status="ok",
        counts={"expired": 69137, "total": 69137},
        tenant_counts={str(other_tenant.pk): {"expired": 69137, "total": 69137}},
    )

    page = new_page("admin@acme.test")
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs", exact=True)).to_be_visible()
    runs = page.locator("#job-runs")
    expect(runs.get_by_text("all tenants")).to_be_visible()
    expect(runs.get_by_text("69137")).to_have_count(0)
    page.get_by_role("button", name="Run now: Prune expired memories").click()
    expect(page.get_by_text("Prune expired memories queued for acme.")).to_be_visible()
    expect(runs.locator("tbody tr")).to_have_count(2)
    own = runs.locator("tbody tr", has_text="acme only")
    expect(own).to_contain_text("Run now")
    expect(own).to_contain_text("2 expired")
    shot(page, "jobs")
    assert Memory.objects.filter(tenant=other_tenant, status="active").count() == 3

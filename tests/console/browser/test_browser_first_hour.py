"""The console's first hour in real Chromium: a new tenant's first steps up to a first memory
(the copied curl snippet, run as copied), the dashboard's charts, search relevance, and a
subject's page with its export and erasure."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from memories.models import Memory, Status
from tests.factories import make_agent
from tests.support.browser import CHROMIUM, browser, expect, new_page, shot  # noqa: F401 - fixtures

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_first_steps_lead_to_a_first_memory_with_the_copied_curl(new_page, owner, tenant):  # noqa: F811
    page = new_page()
    steps = page.locator("[data-getting-started]")
    expect(steps).to_contain_text("Create an agent")
    shot(page, "getting-started")
    steps.get_by_role("link", name="Agents").click()
    page.get_by_label("Slug").fill("support-bot")
    page.get_by_role("button", name="Create agent").click()
    expect(page.get_by_role("heading", name="support-bot")).to_be_visible()
    keys = page.locator("#keys")
    keys.get_by_label("Name").fill("first key")
    keys.get_by_role("button", name="Create key").click()
    raw = page.locator("[data-new-key]").input_value()
    assert raw.startswith("mh_")
    expect(page.locator("#snippet-mcp")).to_contain_text(f"Bearer {raw}")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator('[data-copy="#snippet-curl"]').click()
    expect(page.locator('[data-copy="#snippet-curl"]')).to_have_text("Copied")
    copied = page.evaluate("navigator.clipboard.readText()")
    assert f'-H "Authorization: Bearer {raw}"' in copied
    # The snippet runs as copied: it stores a memory for alice, then finds it.
    done = subprocess.run(["bash", "-c", copied], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and '"message":"Ok"' in done.stdout, done.stderr
    assert "Alice prefers answers in French" in done.stdout.split("}{", 1)[1]
    page.get_by_role("link", name="Dashboard").click()
    expect(page.locator("[data-getting-started]")).to_have_count(0)
    expect(page.get_by_role("img", name="Live memories by category, last 30 days")).to_be_visible()


def test_search_shows_relevance_and_the_dashboard_its_charts(new_page, owner, agent, store_memory):  # noqa: F811
    store_memory(agent, "The customer prefers email over phone calls", subject_id="alice")
    store_memory(agent, "Shipping to Norway takes five days")
    store_memory(agent, "Seems to be moving abroad", capture_mode="inferred", subject_id="alice")
    page = new_page()
    for name in (
        "Live memories by category, last 30 days",
        "Writes and reads per day, last 30 days",
        "Pending reviews by the day they arrived, and why",
    ):
        expect(page.get_by_role("img", name=name)).to_be_visible()
    shot(page, "dashboard-charts")
    page.get_by_role("link", name="Memories", exact=True).click()
    page.get_by_label("Search").fill("email preference")
    table = page.locator("#memory-table")
    expect(table.get_by_role("columnheader", name="Relevance")).to_be_visible()
    first = table.locator("tbody tr").first
    expect(first).to_contain_text("prefers email")
    assert 0 < float(first.locator("[data-relevance]").get_attribute("data-relevance")) <= 1
    shot(page, "search-relevance")


def test_a_subjects_page_exports_and_erases_that_subject(new_page, agent, store_memory, tenant):  # noqa: F811
    from tests.factories import make_operator

    make_operator(tenant, "admin@acme.test", "admin")
    sales = make_agent(tenant, "sales-bot")
    store_memory(agent, "Alice is vegetarian", subject_id="alice", key="diet")
    store_memory(sales, "Alice asked for a discount", subject_id="alice")
    kept = store_memory(agent, "Bob prefers English", subject_id="bob")
    page = new_page("admin@acme.test")
    page.get_by_role("link", name="Memories", exact=True).click()
    page.locator("#memory-table").get_by_role("link", name="alice", exact=True).first.click()
    expect(page.get_by_role("heading", name="Everything about alice")).to_be_visible()
    expect(page.get_by_text("Alice asked for a discount")).to_be_visible()
    expect(page.get_by_text("Bob prefers English")).to_have_count(0)
    shot(page, "subject")
    with page.expect_download() as info:
        page.get_by_role("link", name="Export markdown").click()
    exported = Path(info.value.path()).read_text()
    assert "Alice is vegetarian" in exported and "Bob" not in exported

    page.get_by_label("Type alice to confirm").fill("alice")
    page.get_by_role("button", name="Erase subject").click()
    expect(page.get_by_text("Erased alice: 2 memories tombstoned")).to_be_visible()
    assert not Memory.objects.filter(subject_id="alice", status=Status.ACTIVE).exists()
    assert Memory.objects.get(pk=kept.pk).status == Status.ACTIVE

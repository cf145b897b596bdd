"""Console workflows in real Chromium (Playwright) against the live server.

The system Chromium is used (`/usr/bin/chromium`); Playwright's own browser download is never
needed. Screenshots land in `test-artifacts/screenshots/` (git-ignored).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accounts.models import ApiKey
from memories.models import ChangeType, Memory, MemoryRevision, ReviewState, Status
from memories.services.operator_actions import memory_correct, memory_tombstone
from tests.factories import make_agent
from tests.support.browser import CHROMIUM, expect, shot

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="system Chromium not installed"),
]


def test_login_shows_the_dashboard(new_page, owner, agent, store_memory):
    store_memory(agent, "Customer prefers email over phone", tags=["contact"])
    store_memory(agent, "Renewal is due in March", capture_mode="inferred")
    store_memory(make_agent(agent.tenant, "sales-bot"), "Lead: Dana at Acme", category="daily")
    page = new_page()
    expect(page.get_by_role("link", name="Pending review")).to_be_visible()
    expect(page.get_by_role("link", name="support-bot")).to_be_visible()
    # The charts are drawn by the server: SVG in the page, each an image with a name.
    expect(page.get_by_role("img", name="Live memories by category, last 30 days")).to_be_visible()
    expect(
        page.get_by_role("img", name="Pending reviews by the day they arrived, and why")
    ).to_be_visible()
    shot(page, "dashboard")


def test_filter_memories_by_agent_and_tag(new_page, owner, agent, store_memory):
    sales = make_agent(agent.tenant, "sales-bot")
    store_memory(agent, "Support billing fact", tags=["billing"])
    store_memory(agent, "Support shipping fact", tags=["shipping"])
    store_memory(sales, "Sales billing fact", tags=["billing", "lead"])
    page = new_page()
    page.get_by_role("link", name="Memories", exact=True).click()
    table = page.locator("#memory-table")
    expect(table.get_by_text("Sales billing fact")).to_be_visible()
    shot(page, "memories")
    page.get_by_label("Agent").select_option("support-bot")
    expect(table.get_by_text("Sales billing fact")).to_have_count(0)
    expect(table.get_by_text("Support shipping fact")).to_be_visible()
    page.get_by_label("Tag", exact=True).fill("billing")
    page.get_by_label("Tag", exact=True).press("Enter")
    expect(table.get_by_text("Support shipping fact")).to_have_count(0)
    expect(table.get_by_text("Support billing fact")).to_be_visible()
    assert "agent=support-bot" in page.url and "tag=billing" in page.url  # pushed, shareable
    page.reload()
    expect(page.locator("#memory-table tbody tr")).to_have_count(1)
    # Back restores whole pages (never a bare fragment), filter by filter.
    page.go_back()
    expect(page.get_by_role("heading", name="Memories")).to_be_visible()
    expect(page.get_by_label("Agent")).to_have_value("support-bot")
    expect(table.get_by_text("Support shipping fact")).to_be_visible()


def test_bulk_select_all_and_add_tag(new_page, owner, agent, store_memory):
    memories = [store_memory(agent, f"Bulk fact {i}") for i in range(3)]
    page = new_page()
    page.goto("/console/memories/")
    export_button = page.get_by_role("button", name="Export selected")
    expect(export_button).to_be_disabled()
    page.get_by_label("Select all rows").check()
    expect(page.get_by_text("3 selected")).to_be_visible()
    page.get_by_label(f"Select {memories[0].pk}").uncheck()
    expect(page.get_by_text("2 selected")).to_be_visible()
    page.get_by_label("Tag to add").fill("Audited")
    page.get_by_role("button", name="Add tag").click()
    expect(page.get_by_text("Tagged 2 memories.")).to_be_visible()
    tags = dict(Memory.objects.values_list("pk", "tags"))
    assert tags == {memories[0].pk: [], memories[1].pk: ["audited"], memories[2].pk: ["audited"]}


def test_edit_save_shows_new_text_and_revision(new_page, owner, agent, store_memory):
    store_memory(agent, "The office opens at 9", key="office-hours")
    page = new_page()
    page.goto("/console/memories/")
    page.get_by_role("link", name="office-hours The office opens at 9").click()
    expect(page.get_by_role("heading", name="office-hours")).to_be_visible()
    page.get_by_role("link", name="Edit").click()
    page.get_by_role("textbox", name="Text").fill("The office opens at 8")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-memory-text]")).to_have_text("The office opens at 8")
    history = page.get_by_role("list", name="Revision history")
    expect(history.locator("[data-revision]")).to_have_count(2)
    expect(history.locator("[data-revision]").first).to_contain_text("Correction")
    expect(history.locator("ins").first).to_have_text("8")
    shot(page, "memory-detail")
    memory = Memory.objects.get(key="office-hours")
    assert (memory.text, memory.version) == ("The office opens at 8", 2)


def test_conflicting_save_keeps_the_operators_text(new_page, owner, reviewer, agent, store_memory):
    memory = store_memory(agent, "Original wording", tags=["draft"])
    first = new_page()
    second = new_page("reviewer@acme.test")
    for page in (first, second):
        page.goto(f"/console/memories/{memory.pk}/?edit=1")
        expect(page.get_by_role("textbox", name="Text")).to_have_value("Original wording")
    second.get_by_role("textbox", name="Text").fill("Reviewer's wording")
    second.get_by_label("Tags").fill("draft, reviewed")
    second.get_by_role("button", name="Save").click()
    expect(second.locator("[data-memory-text]")).to_have_text("Reviewer's wording")

    first.get_by_role("textbox", name="Text").fill("Owner's careful wording")
    first.get_by_role("button", name="Save").click()
    conflict = first.locator("[data-conflict]")
    expect(conflict).to_be_visible()
    expect(conflict.locator("[data-newer-text]")).to_have_text("Reviewer's wording")
    expect(conflict.locator('[data-conflict-field="tags"]')).to_contain_text("theirs is kept")
    expect(first.get_by_role("textbox", name="Text")).to_have_value("Owner's careful wording")
    expect(first.get_by_label("Tags")).to_have_value("draft, reviewed")  # the newer tags
    shot(first, "memory-conflict")
    memory.refresh_from_db()
    assert memory.text == "Reviewer's wording"
    # Saving again replaces the newer text with the owner's, and keeps the reviewer's tags.
    first.get_by_role("button", name="Save").click()
    expect(first.locator("[data-memory-text]")).to_have_text("Owner's careful wording")
    memory.refresh_from_db()
    assert (memory.text, memory.tags, memory.version) == (
        "Owner's careful wording",
        ["draft", "reviewed"],
        3,
    )

    # A memory tombstoned while the form was open is never overwritten by Save.
    first.get_by_role("link", name="Edit").click()
    expect(first.get_by_role("textbox", name="Text")).to_have_value("Owner's careful wording")
    memory_tombstone(tenant=agent.tenant, memory_id=memory.pk, actor="operator:t", reason="x")
    first.get_by_role("textbox", name="Text").fill("Too late")
    first.get_by_role("button", name="Save").click()
    expect(first.locator("[data-not-active]")).to_contain_text("Restore first")
    expect(first.get_by_role("button", name="Restore")).to_be_visible()
    memory.refresh_from_db()
    assert (memory.status, memory.text) == (Status.TOMBSTONED, "Owner's careful wording")


def test_tombstone_with_reason_then_restore(new_page, owner, agent, store_memory):
    memory = store_memory(agent, "A fact that turned out wrong")
    page = new_page()
    page.goto(f"/console/memories/{memory.pk}/")
    page.get_by_label("Tombstone reason").fill("customer corrected it")
    page.get_by_role("button", name="Tombstone").click()
    expect(page.locator("[data-tombstone-reason]")).to_have_text("customer corrected it")
    memory.refresh_from_db()
    assert (memory.status, memory.tombstone_reason) == (Status.TOMBSTONED, "customer corrected it")

    page.get_by_role("link", name="Tombstones").click()
    row = page.locator("tr", has_text="A fact that turned out wrong")
    expect(row).to_contain_text("customer corrected it")
    row.get_by_role("button", name="Restore").click()
    expect(row).to_have_count(0)
    memory.refresh_from_db()
    assert memory.status == Status.ACTIVE
    kinds = list(
        MemoryRevision.objects.filter(memory_id=memory.pk)
        .order_by("id")
        .values_list("change_type", flat=True)
    )
    assert kinds[-2:] == [ChangeType.TOMBSTONE, ChangeType.RESTORE]


def test_review_queue_approve_with_the_keyboard(new_page, owner, agent, store_memory):
    oldest = store_memory(agent, "Inferred: prefers mornings", capture_mode="inferred")
    newer = store_memory(agent, "Inferred: lives in Oslo", capture_mode="inferred")
    page = new_page()
    page.goto("/console/review/")
    rows = page.locator("[data-review-row]")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("prefers mornings")  # oldest first
    expect(page.locator("[data-pending-count]")).to_have_text("2")
    shot(page, "review-queue")
    page.keyboard.press("j")
    expect(rows.nth(1)).to_have_class("review-item card is-current")
    page.keyboard.press("k")
    expect(rows.first).to_have_class("review-item card is-current")
    page.keyboard.press("a")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("lives in Oslo")
    oldest.refresh_from_db()
    newer.refresh_from_db()
    assert oldest.review_state == ReviewState.APPROVED
    assert newer.review_state == ReviewState.PENDING
    # The next row is current: `a` again approves it.
    expect(rows.first).to_have_class("review-item card is-current")
    page.keyboard.press("a")
    expect(rows).to_have_count(0)
    expect(page.locator("[data-pending-count]")).to_have_text("0")
    newer.refresh_from_db()
    assert newer.review_state == ReviewState.APPROVED
    page.reload()
    expect(page.get_by_text("Nothing to review.")).to_be_visible()
    shot(page, "review-queue-empty")


def test_review_queue_tombstone_and_edit_with_the_keyboard(new_page, owner, agent, store_memory):
    wrong = store_memory(agent, "Inferred: hates coffee", capture_mode="inferred")
    fixable = store_memory(agent, "Inferred: works at Acem", capture_mode="inferred")
    page = new_page()
    page.goto("/console/review/")
    rows = page.locator("[data-review-row]")
    expect(rows.first).to_have_class("review-item card is-current")
    page.keyboard.press("t")
    expect(page.get_by_label("Tombstone reason").first).to_be_focused()
    page.keyboard.type("customer said otherwise")
    page.keyboard.press("Enter")
    expect(rows).to_have_count(1)
    wrong.refresh_from_db()
    assert (wrong.status, wrong.tombstone_reason) == (Status.TOMBSTONED, "customer said otherwise")
    expect(rows.first).to_have_class("review-item card is-current")  # the next row took over
    page.keyboard.press("e")
    expect(page.get_by_role("textbox", name="Text")).to_have_value("Inferred: works at Acem")
    assert f"/console/memories/{fixable.pk}/?edit=1&next=" in page.url
    # After Save the way back to the queue is one click.
    page.get_by_role("textbox", name="Text").fill("Inferred: works at Acme")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("[data-memory-text]")).to_have_text("Inferred: works at Acme")
    page.get_by_role("link", name="← Back to the review queue").click()
    expect(page.get_by_role("heading", name="Review queue")).to_be_visible()
    expect(page.locator("[data-review-row]")).to_have_count(1)  # still pending: not approved


def test_export_markdown_downloads_every_live_memory(new_page, owner, agent, store_memory):
    live = [store_memory(agent, f"Live fact {i}", key=f"k{i}") for i in range(3)]
    live.append(store_memory(make_agent(agent.tenant, "sales-bot"), "Sales live fact"))
    gone = store_memory(agent, "Tombstoned fact")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:t", reason="x")
    corrected = live[0]
    memory_correct(
        tenant=agent.tenant,
        memory_id=corrected.pk,
        actor="operator:t",
        changes={"text": "Live fact 0, corrected"},
        expected_version=1,
    )
    page = new_page()
    page.get_by_role("link", name="Export", exact=True).click()
    with page.expect_download() as info:
        page.get_by_role("button", name="Export markdown").click()
    download = info.value
    assert download.suggested_filename.startswith("acme-all-")
    assert download.suggested_filename.endswith(".md")
    content = Path(download.path()).read_text()
    for memory in live:
        assert memory.pk in content
    assert "Live fact 0, corrected" in content
    assert gone.pk not in content and "Tombstoned fact" not in content


def test_create_and_revoke_an_api_key(new_page, owner, agent):
    page = new_page()
    page.get_by_role("link", name="Agents").click()
    page.get_by_role("link", name="support-bot").click()
    page.get_by_label("Name", exact=True).fill("ci key")
    page.get_by_role("button", name="Create key").click()
    raw = page.locator("[data-new-key]")
    expect(raw).to_be_visible()
    value = raw.input_value()
    key = ApiKey.objects.get(agent=agent, name="ci key")
    assert value.startswith(key.prefix) and key.revoked_at is None
    page.reload()
    expect(page.locator("[data-new-key]")).to_have_count(0)  # shown once
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Revoke {key.prefix}").click()
    expect(page.locator(f'[data-key-row="{key.prefix}"]')).to_contain_text("revoked")
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_run_extraction_then_approve_the_memory_next_to_its_evidence(
    new_page, owner, agent, fake_llm
):
    from memories.formation.llm import get_llm
    from memories.models import ExtractionRun, RunState
    from tests.support.memories import ingest

    token = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
    thread = ingest(
        agent,
        f"I'm vegetarian. Also, here is my token {token}",
        "Noted, I'll keep that in mind.",
        thread_id="chat-2026-05-01",
        subject_id="user-7",
    )
    # Less confident than the agent's review_below (0.8): the memory waits for review.
    fake_llm.queue_json(
        {
            "operations": [
                {
                    "op": "add",
                    "text": "The user is vegetarian",
                    "key": None,
                    "category": "core",
                    "kind": "preference",
                    "tags": ["diet"],
                    "confidence": 0.7,
                    "mentions": [],
                    "occurred_at": None,
                    "evidence": [1],
                }
            ]
        },
        usage=(640, 32),
    )
    page = new_page()
    page.get_by_role("link", name="Threads").click()
    row = page.locator('[data-thread-row="chat-2026-05-01"]')
    expect(row).to_contain_text("user-7")
    expect(row.locator("[data-thread-state]")).to_have_text("idle")  # sent with extract: off
    row.get_by_role("link", name="chat-2026-05-01").click()
    expect(page.get_by_role("heading", name="Thread chat-2026-05-01")).to_be_visible()
    first = page.locator('[data-message-seq="1"]')
    expect(first.locator("[data-redacted]")).to_have_text("redacted: github_token")
    expect(first).to_contain_text("[redacted:github_token]")

    # The openai SDK takes seconds to import the first time: pay that here, not inside the
    # request the browser waits on (the live server shares this process and its settings).
    get_llm()
    page.get_by_role("button", name="Run extraction").click()
    run = page.locator("[data-run]").first
    expect(run.locator("[data-run-state]")).to_have_text("done", timeout=20_000)
    expect(run).to_contain_text("640 / 32")
    expect(run.get_by_role("link", name="The user is vegetarian")).to_be_visible()
    expect(page.locator("[data-flash]")).to_contain_text("done")
    shot(page, "thread-detail")
    assert token not in page.content()
    extraction = ExtractionRun.objects.get(thread=thread)
    assert (extraction.state, extraction.trigger) == (RunState.DONE, "console")

    page.get_by_role("link", name="Review queue").click()
    item = page.locator("[data-review-row]", has_text="The user is vegetarian")
    expect(item.locator('[data-review-reason="low_confidence"]')).to_contain_text(
        "confidence 0.70, below support-bot's review threshold (0.80)"
    )
    evidence = item.locator("[data-evidence]")
    expect(evidence).to_contain_text("I'm vegetarian.")
    expect(evidence.locator("[data-redacted]")).to_have_text("redacted: github_token")
    expect(evidence).not_to_contain_text("Noted, I'll keep that in mind.")
    expect(evidence.get_by_role("link", name="thread chat-2026-05-01")).to_have_attribute(
        "href", f"/console/threads/{thread.pk}/"
    )
    shot(page, "review-evidence")
    expect(item).to_have_class("review-item card is-current")
    page.keyboard.press("a")
    expect(page.locator("[data-review-row]")).to_have_count(0)
    memory = Memory.objects.get(text="The user is vegetarian")
    assert memory.review_state == ReviewState.APPROVED
    assert memory.evidence == {
        "thread_id": "chat-2026-05-01",
        "messages": [1],
        "run_id": extraction.pk,
    }

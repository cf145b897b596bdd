"""The console says rather than hides: why a memory waits for review, how relevant a search hit
is, what memory an Activity line is about, and what to do on an empty page."""

from __future__ import annotations

import re

import pytest

from memories.models import Memory
from memories.services.operator_actions import memory_purge
from tests.factories import make_agent
from tests.support.memories import store

pytestmark = pytest.mark.django_db


def reason_of(body: str, memory) -> str:
    row = body[body.index(f'id="review-{memory.pk}"') :]
    match = re.search(
        r'<p class="review-reason" data-review-reason="([a-z_]+)">(.*?)</p>', row, re.S
    )
    return f"{match.group(1)}: {' '.join(re.sub(r'<[^>]+>', '', match.group(2)).split())}"


def test_the_review_queue_says_why_each_memory_waits(reviewer_client, agent):
    first = store(agent, "My son Colby lives in Los Angeles")
    near = store(agent, "my son colby lives in los angeles", dedup_policy="ask")
    inferred = store(agent, "Seems to like jazz", capture_mode="inferred", confidence=0.6)
    formed = {"source_provider": "extraction:gpt-4o-mini", "capture_mode": "inferred"}
    careful = make_agent(agent.tenant, "careful-bot", extraction="review")
    low = store(agent, "Maybe moving to Porto", confidence=0.62, **formed)
    Memory.objects.filter(pk=low.pk).update(review_reason="low_confidence")
    policy = store(careful, "Likes tea", confidence=0.95, **formed)
    Memory.objects.filter(pk=policy.pk).update(review_reason="agent_policy")

    body = reviewer_client.get("/console/review/").content.decode()

    assert reason_of(body, near) == (
        "near_duplicate: Why it waits: stored next to a near-duplicate: "
        "“My son Colby lives in Los Angeles” (1.00 similar). Merge them, or approve both."
    )
    assert f'href="/console/memories/{first.pk}/"' in body
    assert reason_of(body, inferred) == (
        "inferred: Why it waits: inferred by support-bot, not stated: the agent stored it as "
        "inferred (confidence 0.60)."
    )
    assert reason_of(body, low) == (
        "low_confidence: Why it waits: formed from a conversation with confidence 0.62, below "
        "support-bot's review threshold (0.80)."
    )
    assert reason_of(body, policy) == (
        "agent_policy: Why it waits: careful-bot's policy reviews every memory formed from a "
        "conversation (extraction: review)."
    )


def test_a_pending_memorys_page_says_why_too(owner_client, agent):
    memory = store(agent, "Seems to like jazz", capture_mode="inferred")
    body = owner_client.get(f"/console/memories/{memory.pk}/").content.decode()
    assert 'data-review-reason="inferred"' in body and "inferred by support-bot" in body
    settled = store(agent, "Likes blues")
    assert (
        "data-review-reason"
        not in owner_client.get(f"/console/memories/{settled.pk}/").content.decode()
    )


def test_console_search_shows_each_hits_relevance_best_first(owner_client, agent):
    store(agent, "The customer prefers email over phone calls")
    store(agent, "Shipping to Norway takes five days")
    body = owner_client.get("/console/memories/?q=email+preference").content.decode()
    assert ">Relevance</th>" in body
    scores = [float(s) for s in re.findall(r'data-relevance="([0-9.]+)"', body)]
    assert scores and scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    assert '<meter min="0" max="1" value="' in body
    assert ">Relevance</th>" not in owner_client.get("/console/memories/").content.decode()


def test_activity_names_each_memory_by_its_text(owner_client, admin_user, agent, login):
    kept = store(agent, "Prefers answers in French", key="pref.language")
    gone = store(agent, "A secretless fact to purge")
    memory_purge(tenant=agent.tenant, memory_id=gone.pk, actor="operator:admin@acme.test")
    body = owner_client.get("/console/activity/").content.decode()
    assert f'title="{kept.pk}">Prefers answers in French</a>' in body
    # Purged: the text is gone; the line names the memory by its id.
    assert f'<span class="mono">{gone.pk}</span> <span class="muted small">(erased)</span>' in body


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("/console/memories/", "No memories yet. Agents store them with"),
        ("/console/review/", "Nothing to review. Memories an agent stores as"),
        ("/console/activity/", "Nothing has happened yet. Every store, edit, review"),
        ("/console/threads/", "Agents hand MemoryHub their conversations with"),
        ("/console/jobs/", "No runs yet. The schedules above start them"),
        ("/console/tombstones/", "No tombstones. A memory an agent forgets"),
        ("/console/agents/", "No agents yet."),
    ],
)
def test_every_empty_page_says_what_would_fill_it(owner_client, url, says):
    assert says in owner_client.get(url).content.decode()


def test_an_empty_filtered_list_offers_to_reset_the_filters(owner_client, agent):
    store(agent, "Something")
    body = owner_client.get("/console/memories/?category=nothing-here").content.decode()
    assert "No memories match these filters." in body and "No memories yet" not in body

"""The dashboard: its charts (the last 30 UTC days, drawn as SVG on the server), their figures,
their cost, and the first steps it shows a tenant that holds nothing yet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.principal import Principal
from memories.console import memory_selectors as sel
from memories.console import trends
from memories.models import ExtractionRun, MemoryRevision
from memories.retrieval.search import memory_search
from memories.services.operator_actions import memory_tombstone
from memories.services.store import memory_store
from tests.factories import make_agent, make_key, make_operator, make_tenant

NOW = datetime(2026, 3, 31, 12, 0, tzinfo=UTC)
DAYS = trends._window(NOW)


def put(agent, text: str, *, days_ago: float, base: datetime = NOW, **fields):
    """Store as `agent` `days_ago` before `base` (NOW; the views' tests: the real clock)."""
    principal = Principal(tenant=agent.tenant, agent=agent)
    data = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=data, now=base - timedelta(days=days_ago)).memory


def at(series: list[int], days_ago: int) -> int:
    return series[len(DAYS) - 1 - days_ago]


@pytest.mark.django_db
def test_live_memories_by_category_are_walked_back_from_today(agent):
    kept = put(agent, "Kept core fact", days_ago=10)
    gone = put(agent, "Forgotten core fact", days_ago=10)
    memory_tombstone(
        tenant=agent.tenant, memory_id=gone.pk, actor="operator:x", now=NOW - timedelta(days=5)
    )
    put(agent, "Old note", days_ago=40, category="notes")
    # Past its expiry two days ago, not yet pruned: no longer live since then.
    put(agent, "Temporary rule", days_ago=20, category="workspace", ttl="18d")
    live_now = sel.dashboard_stats(tenant=agent.tenant, now=NOW)["by_category"]
    assert live_now == {"core": 1, "notes": 1}

    series = trends.live_by_category(tenant=agent.tenant, days=DAYS, now=NOW, live_now=live_now)

    core = series["core"]
    assert (at(core, 11), at(core, 10), at(core, 6), at(core, 5), at(core, 0)) == (0, 2, 2, 1, 1)
    assert set(series["notes"]) == {1}  # stored before the window: live throughout
    workspace = series["workspace"]
    assert (at(workspace, 21), at(workspace, 20), at(workspace, 3), at(workspace, 2)) == (
        0,
        1,
        1,
        0,
    )
    assert kept.category == "core"


@pytest.mark.django_db
def test_writes_reads_pending_and_runs_by_day_and_only_the_tenants_own(agent, make_thread):
    me = Principal(tenant=agent.tenant, agent=agent)
    fact = put(agent, "Likes green tea", days_ago=3, key="tea")
    memory_store(principal=me, data={"text": "Likes black tea", "key": "tea"}, now=NOW)
    put(agent, "Seems to like jazz", days_ago=2, capture_mode="inferred")
    put(agent, "Lives in Lisbon", days_ago=45, capture_mode="inferred")  # waits since long ago
    for hours in (1, 2):
        memory_search(principal=me, data={"query": "tea"}, now=NOW - timedelta(hours=hours))
    thread = make_thread(agent, "hello")
    for days_ago, state, tokens in ((1, "done", 500), (1, "failed", 0), (0, "done", 700)):
        ExtractionRun.objects.create(
            tenant=agent.tenant,
            thread=thread,
            agent=agent,
            trigger="schedule",
            state=state,
            prompt_tokens=tokens,
            created_at=NOW - timedelta(days=days_ago),
        )
    # Another tenant's activity is never counted here.
    other = make_agent(make_tenant("globex"), "globex-bot")
    put(other, "Globex fact", days_ago=0, capture_mode="inferred")
    memory_search(
        principal=Principal(tenant=other.tenant, agent=other), data={"query": "x"}, now=NOW
    )

    writes = trends.writes_per_day(tenant=agent.tenant, days=DAYS)
    assert (at(writes, 3), at(writes, 2), at(writes, 0)) == (1, 1, 1)
    assert (
        sum(writes)
        == MemoryRevision.objects.for_tenant(agent.tenant)
        .filter(created_at__gte=trends._start(DAYS))
        .count()
    )
    reads = trends.reads_per_day(tenant=agent.tenant, days=DAYS)
    assert at(reads, 0) == 2 and sum(reads) == 2
    pending, older = trends.pending_by_arrival(tenant=agent.tenant, days=DAYS, now=NOW)
    assert pending == {"inferred": [1 if i == len(DAYS) - 3 else 0 for i in range(len(DAYS))]}
    assert older == 1
    runs, tokens = trends.runs_per_day(tenant=agent.tenant, days=DAYS)
    assert (at(runs["done"], 1), at(runs["failed"], 1), at(runs["done"], 0)) == (1, 1, 1)
    assert (at(tokens, 1), at(tokens, 0)) == (500, 700)
    assert fact.key == "tea"


@pytest.mark.django_db
def test_the_dashboard_draws_its_charts_in_a_fixed_number_of_queries(owner_client, agent):
    put(agent, "Prefers email", days_ago=0, base=timezone.now())

    def load() -> tuple[str, int]:
        with CaptureQueriesContext(connection) as ctx:
            response = owner_client.get("/console/")
        assert response.status_code == 200
        return response.content.decode(), len(ctx.captured_queries)

    body, few = load()
    assert body.count("<svg") == 2  # nothing pending, no runs: those say what would fill them
    for i in range(30):
        put(
            agent,
            f"fact {i}",
            days_ago=i % 12,
            base=timezone.now(),
            category=f"c{i % 7}",
            capture_mode="inferred",
        )
    body, many = load()
    # session, user, membership (+ tenant); the summary: counts by agent and category,
    # totals, recent activity and its labels, last prune; the charts: created, departed,
    # writes, reads, pending, runs; the webhooks that were disabled (a warning); the last
    # scheduled backup (admins: one query, also while backups are off).
    assert few == many == 16
    assert body.count("<svg") == 3
    assert 'aria-label="Live memories by category, last 30 days"' in body
    assert ">other<" in body  # seven categories: the five largest, then the rest together
    assert "30 waiting." in body
    assert "Getting started" not in body
    assert "<script" not in body.split('id="dashboard-body"')[1]


@pytest.mark.django_db
def test_an_empty_chart_says_what_would_fill_it(owner_client, agent):
    put(agent, "Prefers email", days_ago=0, base=timezone.now())
    body = owner_client.get("/console/").content.decode()
    assert "Nothing waits for review." in body
    assert "No extraction runs in the last 30 days." in body


@pytest.mark.django_db
def test_a_new_tenant_gets_its_first_steps_with_ready_snippets(login, tenant):
    owner = make_operator(tenant, "owner@acme.test", "owner").user
    viewer = make_operator(tenant, "viewer@acme.test", "viewer").user
    body = login(owner).get("/console/").content.decode()
    assert "Getting started" in body and "step-done" not in body
    assert "Agents</a> page (e.g. <code>support-bot</code>)" in body
    assert "curl -s -X POST http://testserver/api/v1/memories" in body
    assert '"url": "http://testserver/mcp"' in body and "$MEMORYHUB_KEY" in body
    assert "an admin creates one" in login(viewer).get("/console/").content.decode()

    agent = make_agent(tenant, "support-bot")
    body = login(owner).get("/console/").content.decode()
    assert body.count("step-done") == 1 and "/console/agents/support-bot/#keys" in body
    make_key(agent)
    assert login(owner).get("/console/").content.decode().count("step-done") == 2
    put(agent, "First memory", days_ago=0, base=timezone.now())
    assert "Getting started" not in login(owner).get("/console/").content.decode()


@pytest.mark.django_db
def test_a_new_key_comes_with_ready_curl_and_mcp_snippets(login, admin_user, agent):
    response = login(admin_user).post(
        f"/console/agents/{agent.slug}/keys/", {"name": "ci", "scopes": ["read", "write"]}
    )
    body = response.content.decode()
    raw = body.split("data-new-key>")[0].rsplit('value="', 1)[1].split('"')[0]
    assert raw.startswith("mh_")
    assert f'-H "Authorization: Bearer {raw}"' in body
    assert f'"headers": {{"Authorization": "Bearer {raw}"}}' in body
    assert response["Cache-Control"] == "no-store"

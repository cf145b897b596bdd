"""Hydrate (SPEC §4): selection order, budget arithmetic, categories, threads, explain, format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.principal import Principal
from memories.embeddings import get_embedder
from memories.models import Memory
from memories.retrieval.hydrate import memory_hydrate
from memories.services.store import memory_store

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def put(principal, text, minute=0, **fields):
    body = {"text": text, "dedup_policy": "insert", **fields}
    now = T0 + timedelta(minutes=minute)
    return memory_store(principal=principal, data=body, now=now).memory


def hydrate(principal, **body):
    return memory_hydrate(principal=principal, data=body, now=T0 + timedelta(days=1))


def picked(result):
    return [(entry["id"], entry["reason"]) for entry in result["entries"]]


def sized(n: int, label: str) -> str:
    """A text of exactly n UTF-8 bytes."""
    return (label + " " + "x" * n)[:n]


@pytest.fixture
def me(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


@pytest.mark.django_db
def test_core_first_newest_first_then_recent_with_exact_budget(me):
    core_old = put(me, sized(100, "core old"), minute=1, category="core")
    core_new = put(me, sized(100, "core new"), minute=2, category="core")
    daily_old = put(me, sized(100, "daily old"), minute=3, category="daily")
    custom = put(me, sized(100, "custom"), minute=4, category="projects")
    daily_new = put(me, sized(100, "daily new"), minute=5, category="daily")
    workspace = put(me, sized(100, "workspace"), minute=6, category="workspace")

    result = hydrate(me, budget_bytes=450)
    assert picked(result) == [
        (core_new.id, "core"),
        (core_old.id, "core"),
        (workspace.id, "recent"),
        (daily_new.id, "recent"),
    ]
    assert result["bytes_used"] == 400
    assert result["budget_bytes"] == 450
    assert "markdown" not in result and "omitted" not in result

    everything = hydrate(me, budget_bytes=600)
    assert [e["id"] for e in everything["entries"]][-2:] == [custom.id, daily_old.id]
    assert everything["bytes_used"] == 600


@pytest.mark.django_db
def test_default_budget_is_the_agents_policy(me, agent):
    agent.hydration_budget_bytes = 250
    agent.save()
    for minute in range(5):
        put(me, sized(100, f"fact {minute}"), minute=minute)
    result = hydrate(me)
    assert result["budget_bytes"] == 250
    assert result["bytes_used"] == 200
    assert len(result["entries"]) == 2


@pytest.mark.django_db
def test_entries_are_whole_memory_objects(me):
    memory = put(me, "Speaks French and German.", key="languages", tags=["profile"])
    [entry] = hydrate(me)["entries"]
    assert entry["id"] == memory.id
    assert entry["reason"] == "core"
    assert entry["text"] == "Speaks French and German."
    assert entry["key"] == "languages" and entry["tags"] == ["profile"]
    assert entry["size_bytes"] == memory.size_bytes and entry["source"] == "own"
    assert "embedding" not in entry


@pytest.mark.django_db
def test_core_written_once_still_loads_after_1000_newer_daily_writes(me, tenant, agent):
    core = put(me, "Customer is on the Enterprise plan.", minute=0, category="core")
    vector = get_embedder().embed(["daily note"])[0]
    Memory.objects.bulk_create(
        Memory(
            tenant=tenant,
            agent=agent,
            created_by="agent:support-bot",
            category="daily",
            text=f"daily note {i:04d}",
            size_bytes=len(f"daily note {i:04d}"),
            embedding=vector,
            created_at=T0 + timedelta(minutes=10 + i),
            updated_at=T0 + timedelta(minutes=10 + i),
        )
        for i in range(1000)
    )
    result = hydrate(me, budget_bytes=200)
    assert result["entries"][0]["id"] == core.id
    assert result["entries"][0]["reason"] == "core"
    # The rest of the budget goes to the newest daily notes, newest first.
    assert [e["text"] for e in result["entries"][1:4]] == [
        "daily note 0999",
        "daily note 0998",
        "daily note 0997",
    ]
    assert result["bytes_used"] <= 200
    assert 200 - result["bytes_used"] < len("daily note 0000")
    # A budget that needs several batches of candidates walks them in order without gaps.
    core_size = result["entries"][0]["size_bytes"]
    big = hydrate(me, budget_bytes=core_size + 15 * 700)
    assert [e["text"] for e in big["entries"][1:]] == [
        f"daily note {i:04d}" for i in range(999, 299, -1)
    ]
    assert big["bytes_used"] == core_size + 15 * 700


@pytest.mark.django_db
def test_oversized_entry_skipped_while_a_smaller_later_one_fits(me):
    big_core = put(me, sized(500, "big core"), minute=5, category="core")
    small_core = put(me, sized(50, "small core"), minute=1, category="core")
    newest = put(me, sized(300, "big daily"), minute=9, category="daily")
    middle = put(me, sized(120, "medium daily"), minute=8, category="daily")
    small = put(me, sized(30, "small daily"), minute=7, category="daily")

    result = hydrate(me, budget_bytes=210, explain=True)
    assert picked(result) == [
        (small_core.id, "core"),
        (middle.id, "recent"),
        (small.id, "recent"),
    ]
    assert result["bytes_used"] == 200
    assert sorted(result["omitted"], key=lambda o: o["memory_id"]) == sorted(
        [
            {"memory_id": big_core.id, "reason": "too_big"},
            {"memory_id": newest.id, "reason": "too_big"},
        ],
        key=lambda o: o["memory_id"],
    )


@pytest.mark.django_db
def test_explain_reports_windowed_entries(me):
    kept = put(me, sized(100, "new"), minute=2, category="daily")
    dropped = put(me, sized(100, "old"), minute=1, category="daily")
    result = hydrate(me, budget_bytes=150, explain=True)
    assert picked(result) == [(kept.id, "recent")]
    assert result["omitted"] == [{"memory_id": dropped.id, "reason": "windowed"}]


@pytest.mark.django_db
def test_archival_only_with_auto_mode_and_a_query(me):
    recent = put(me, "Prefers window seats.", minute=1, category="daily")
    archived = put(me, "Flew to Lisbon in 2019 and loved the trams.", minute=0, category="archival")
    put(me, "Owns a red bicycle.", minute=0, category="archival")

    for mode in ("tool_only", "off"):
        result = hydrate(me, archival_mode=mode, query="Lisbon trams")
        assert picked(result) == [(recent.id, "recent")]
    assert picked(hydrate(me, archival_mode="auto")) == [(recent.id, "recent")]

    result = hydrate(me, archival_mode="auto", query="Lisbon trams")
    assert picked(result) == [(recent.id, "recent"), (archived.id, "archival_match")]
    limited = hydrate(me, archival_mode="auto", query="Lisbon trams", archival_limit=0)
    assert picked(limited) == [(recent.id, "recent")]
    strict = hydrate(me, archival_mode="auto", query="Lisbon trams", archival_min_score=1.0)
    assert picked(strict) == [(recent.id, "recent")]


@pytest.mark.django_db
def test_archival_matches_share_the_budget(me):
    put(me, sized(100, "daily"), minute=1, category="daily")
    put(me, sized(100, "archival lisbon"), minute=0, category="archival")
    result = hydrate(me, archival_mode="auto", query="archival lisbon", budget_bytes=150)
    assert [e["reason"] for e in result["entries"]] == ["recent"]
    assert result["bytes_used"] == 100


@pytest.mark.django_db
def test_conversation_only_for_its_thread(me):
    core = put(me, "Name is Dana.", minute=0)
    mine = put(me, "Asked about refunds.", minute=1, category="conversation", thread_id="run-1")
    put(me, "Asked about shipping.", minute=2, category="conversation", thread_id="run-2")

    assert picked(hydrate(me)) == [(core.id, "core")]
    assert picked(hydrate(me, thread_id="run-1")) == [(core.id, "core"), (mine.id, "recent")]
    assert picked(hydrate(me, session_id="run-1")) == [(core.id, "core"), (mine.id, "recent")]


@pytest.mark.django_db
def test_agent_core_and_user_core_switches(me):
    agent_core = put(me, "Always answer in English.", minute=0)
    user_core = put(me, "Alice is vegetarian.", minute=1, subject_id="alice")
    put(me, "Bob is allergic to nuts.", minute=2, subject_id="bob")

    def ids(**body):
        return [e["id"] for e in hydrate(me, subject_id="alice", **body)["entries"]]

    assert ids() == [user_core.id, agent_core.id]
    assert ids(include_agent_core=False) == [user_core.id]
    assert ids(include_user_core=False) == [agent_core.id]
    # Without a subject only subject-less memories are visible.
    assert [e["id"] for e in hydrate(me)["entries"]] == [agent_core.id]


@pytest.mark.django_db
def test_expired_and_other_agents_memories_are_not_loaded(me, tenant):
    from tests.factories import make_agent

    other = Principal(tenant=tenant, agent=make_agent(tenant, "other-bot"))
    put(other, "Other agent's core fact.", minute=0)
    put(me, "Short-lived note.", minute=0, category="daily", ttl="1h")
    kept = put(me, "Durable fact.", minute=0)
    assert picked(hydrate(me)) == [(kept.id, "core")]


@pytest.mark.django_db
def test_markdown_format(me):
    put(me, "Speaks French.", minute=0, key="languages")
    put(me, "Opened ticket 7.", minute=1, category="daily", tags=["support"])
    result = hydrate(me, format="markdown")
    markdown = result["markdown"]
    assert markdown.startswith("## Memory context (2 entries,")
    assert "### core\n- **languages**: Speaks French." in markdown
    assert "### daily\n- Opened ticket 7." in markdown and "#support" in markdown
    assert len(result["entries"]) == 2


@pytest.mark.django_db
def test_hydrate_over_http(api_client, agent):
    api_client.post("/api/v1/memories", {"text": "Likes tea."}, format="json")
    response = api_client.post("/api/v1/hydrate", {"budget_bytes": 100}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True and body["budget_bytes"] == 100 and body["bytes_used"] == 10
    assert [e["text"] for e in body["entries"]] == ["Likes tea."]
    bad = api_client.post("/api/v1/hydrate", {"archival_mode": "always"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["details"]["field"] == "archival_mode"
    bad = api_client.post("/api/v1/hydrate", {"budget_bytes": -1}, format="json")
    assert bad.json()["error"]["details"]["field"] == "budget_bytes"


@pytest.mark.django_db
def test_a_memory_changed_between_choosing_and_reading_is_left_out(me, monkeypatch):
    from memories.retrieval import hydrate as hydrate_module

    kept = put(me, sized(100, "kept"), minute=1, category="core")
    forgotten = put(me, sized(100, "forgotten"), minute=2, category="core")
    grown = put(me, sized(100, "grown"), minute=3, category="core")
    original = hydrate_module._entries

    def meanwhile(principal, taken, budget, now):
        # Another request changes two of the chosen memories after the walk chose them.
        Memory.objects.filter(pk=forgotten.pk).update(status="tombstoned")
        Memory.objects.filter(pk=grown.pk).update(text=sized(300, "grown"), size_bytes=300)
        return original(principal, taken, budget, now)

    monkeypatch.setattr(hydrate_module, "_entries", meanwhile)
    result = hydrate(me, budget_bytes=300)
    assert picked(result) == [(kept.id, "core")]
    assert result["bytes_used"] == 100
    assert all(entry["status"] == "active" for entry in result["entries"])

"""Hydrate (docs/api.md#hydrate--post-apiv1hydrate): selection order, budget arithmetic, categories,
threads, explain, format."""

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


def archival(result):
    return [(match["id"], match["score"] > 0) for match in result["archival"]]


@pytest.mark.django_db
def test_archival_only_with_auto_mode_and_a_query(me):
    recent = put(me, "Prefers window seats.", minute=1, category="daily")
    archived = put(me, "Flew to Lisbon in 2019 and loved the trams.", minute=0, category="archival")
    put(me, "Owns a red bicycle.", minute=0, category="archival")

    for mode in ("tool_only", "off"):
        result = hydrate(me, archival_mode=mode, query="Lisbon trams")
        assert picked(result) == [(recent.id, "recent")] and result["archival"] == []
    assert hydrate(me, archival_mode="auto")["archival"] == []

    result = hydrate(me, archival_mode="auto", query="Lisbon trams")
    assert picked(result) == [(recent.id, "recent")]
    assert archival(result) == [(archived.id, True)]
    [match] = result["archival"]
    assert match["text"] == archived.text and match["category"] == "archival"
    assert 0 < match["score"] <= 1 and match["source"] == "own"
    limited = hydrate(me, archival_mode="auto", query="Lisbon trams", archival_limit=0)
    assert limited["archival"] == []
    strict = hydrate(me, archival_mode="auto", query="Lisbon trams", archival_min_score=1.0)
    assert strict["archival"] == []


@pytest.mark.django_db
def test_archival_matches_come_apart_even_when_the_recency_fill_uses_the_whole_budget(me):
    """Archival matches no longer compete with the recency fill."""
    for minute in range(1, 6):
        put(me, sized(100, f"daily note {minute}"), minute=minute, category="daily")
    match = put(me, sized(100, "archival lisbon trams"), minute=0, category="archival")
    result = hydrate(me, archival_mode="auto", query="lisbon trams", budget_bytes=300)
    assert [e["reason"] for e in result["entries"]] == ["recent"] * 3
    assert result["bytes_used"] == 300 and result["budget_bytes"] == 300
    assert archival(result) == [(match.id, True)]


@pytest.mark.django_db
def test_archival_list_is_bounded_by_the_agents_archival_max_chars(me, agent):
    agent.archival_max_chars = 150
    agent.save()
    me.agent.archival_max_chars = 150
    long = put(me, "Lisbon trams " + "x" * 100, minute=0, category="archival")  # 113 chars
    longer = put(me, "Lisbon trams, the 28 " + "y" * 120, minute=1, category="archival")  # 141
    short = put(me, "Lisbon trams are yellow.", minute=2, category="archival")  # 24
    result = hydrate(me, archival_mode="auto", query="Lisbon trams", archival_min_score=0.0)
    ids = [m["id"] for m in result["archival"]]
    # Best first while the characters last; one that would pass the bound is skipped.
    assert len(ids) == 2 and short.id in ids and (long.id in ids) != (longer.id in ids)
    scores = [m["score"] for m in result["archival"]]
    assert scores == sorted(scores, reverse=True)


@pytest.mark.django_db
def test_25_core_memories_load_20_and_explain_5_as_core_limit(me):
    core = [put(me, f"Core fact number {i:02d}.", minute=i) for i in range(25)]
    result = hydrate(me, explain=True, budget_bytes=100_000)
    assert picked(result) == [(m.id, "core") for m in reversed(core[5:])]
    assert sorted(result["omitted"], key=lambda o: o["memory_id"]) == [
        {"memory_id": m.id, "reason": "core_limit"} for m in core[:5]
    ]


@pytest.mark.django_db
def test_core_blocks_are_bounded_apart_by_entries_and_characters(me, agent):
    agent.core_max_entries, agent.core_max_chars = 2, 60
    agent.save()
    me.agent.core_max_entries, me.agent.core_max_chars = 2, 60
    own = [put(me, sized(20, f"own {i}"), minute=i) for i in range(3)]
    user = [
        put(me, sized(25, f"user {i}"), minute=i, scope="user", subject_id="ann") for i in range(3)
    ]
    big = put(me, sized(50, "user big"), minute=10, scope="user", subject_id="ann")
    result = hydrate(me, subject_id="ann", explain=True, budget_bytes=10_000)
    # The user block first: the newest (50 chars) leaves 10, too few for the next ones; the
    # agent block: its two newest (40 chars).
    assert picked(result) == [(big.id, "core"), (own[2].id, "core"), (own[1].id, "core")]
    omitted = {o["memory_id"]: o["reason"] for o in result["omitted"]}
    assert omitted == {m.id: "core_limit" for m in [*user, own[0]]}
    # Recency memories are not held to the core limits.
    notes = [put(me, sized(30, f"note {i}"), minute=20 + i, category="daily") for i in range(3)]
    result = hydrate(me, subject_id="ann", budget_bytes=10_000)
    assert [e["id"] for e in result["entries"] if e["reason"] == "recent"] == [
        n.id for n in reversed(notes)
    ]


@pytest.mark.django_db
def test_conversation_only_for_its_thread(me):
    core = put(me, "Name is Dana.", minute=0)
    mine = put(me, "Asked about refunds.", minute=1, category="conversation", thread_id="run-1")
    put(me, "Asked about shipping.", minute=2, category="conversation", thread_id="run-2")

    assert picked(hydrate(me)) == [(core.id, "core")]
    assert picked(hydrate(me, thread_id="run-1")) == [(core.id, "core"), (mine.id, "recent")]
    assert picked(hydrate(me, session_id="run-1")) == [(core.id, "core"), (mine.id, "recent")]


@pytest.mark.django_db
def test_agent_core_and_user_core_switches(me, tenant):
    from tests.factories import make_agent

    agent_core = put(me, "Always answer in English.", minute=0)
    own_of_alice = put(me, "Alice's ticket is #42.", minute=1, subject_id="alice")
    user_core = put(me, "Alice is vegetarian.", minute=2, subject_id="alice", scope="user")
    put(me, "Bob is allergic to nuts.", minute=3, subject_id="bob", scope="user")
    put(me, "Bob's ticket is #7.", minute=4, subject_id="bob")
    # Another agent's user memory of Alice is hers: it loads for every agent acting for her.
    other = Principal(tenant=tenant, agent=make_agent(tenant, "billing-bot"))
    theirs = put(other, "Alice pays by invoice.", minute=5, subject_id="alice", scope="user")

    def ids(**body):
        return [e["id"] for e in hydrate(me, subject_id="alice", **body)["entries"]]

    # The user block (newest first), then the agent block (of Alice, and subject-less).
    assert ids() == [theirs.id, user_core.id, own_of_alice.id, agent_core.id]
    assert ids(include_agent_core=False) == [theirs.id, user_core.id]
    assert ids(include_user_core=False) == [own_of_alice.id, agent_core.id]
    assert ids(include_user_core=False, include_agent_core=False) == []
    # Without a subject only subject-less memories are visible: no user memory at all.
    assert [e["id"] for e in hydrate(me)["entries"]] == [agent_core.id]
    [entry] = [e for e in hydrate(me, subject_id="alice")["entries"] if e["id"] == theirs.id]
    assert entry["scope"] == "user" and entry["source"] == "user" and entry["agent"] is None


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
    put(me, "Visited the Lisbon office in 2021.", minute=2, category="archival")
    result = hydrate(me, format="markdown", archival_mode="auto", query="Lisbon office")
    markdown = result["markdown"]
    assert markdown.startswith("## Memory context (2 entries,")
    assert "### core\n- **languages**: Speaks French." in markdown
    assert "### daily\n- Opened ticket 7." in markdown and "#support" in markdown
    assert markdown.endswith(
        "\n### Possibly relevant\n- Visited the Lisbon office in 2021. (2026-03-01)\n"
    )
    assert len(result["entries"]) == 2 and len(result["archival"]) == 1


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

"""Context-aware ranking (docs/api.md#search--post-apiv1search): sequences of a thread, event dates,
mentions; and memories without any of these ranking exactly by the hybrid formula of before."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from accounts.principal import Principal
from memories.models import Memory
from memories.retrieval.context_ranking import query_dates
from memories.retrieval.search import memory_search
from memories.services.changes import memory_update
from memories.services.lifecycle import memory_forget
from memories.services.store import memory_store

T0 = datetime(2026, 5, 8, 13, 56, tzinfo=UTC)
FILLER = [
    "Ana: My sister is moving to Porto next spring.",
    "Ben: I fixed the bike chain on Saturday.",
    "Ana: The bakery downstairs sells great croissants.",
    "Ben: Work has been busy with the quarterly report.",
]


@pytest.fixture
def me(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


def put(principal, text, **fields):
    body = {"text": text, "dedup_policy": "insert", "category": "archival", **fields}
    return memory_store(principal=principal, data=body, now=T0).memory


def turns(principal, texts, *, thread="session-1", start=T0, order=None):
    """Store `texts` as turns of one thread a second apart (in `order` of their indexes)."""
    stored = {}
    for i in order or range(len(texts)):
        stored[i] = put(
            principal,
            texts[i],
            thread_id=thread,
            occurred_at=(start + timedelta(seconds=i)).isoformat(),
        )
    return [stored[i] for i in range(len(texts))]


def ranked(principal, query, mode="hybrid", **body):
    result = memory_search(
        principal=principal,
        data={"query": query, "mode": mode, "limit": 20, **body},
        now=T0 + timedelta(days=30),
    )
    return [hit["id"] for hit in result["memories"]], result["memories"]


def links(memory):
    row = Memory.objects.get(pk=memory.pk)
    return row.prev_id, row.next_id, row.context_text


CONVERSATION = [
    "Ana: Did you get to visit the Louvre museum in Paris?",
    "Ben: Yes, last week!",
    *FILLER,
]


@pytest.mark.django_db
def test_a_short_answer_turn_is_found_through_its_neighbour(me, agent):
    question, answer, *_ = turns(me, CONVERSATION)
    ids, _hits = ranked(me, "When did Ben visit the Louvre museum?")
    assert ids[:2] == [question.pk, answer.pk] or ids[:2] == [answer.pk, question.pk]
    # Its own words weigh more than its neighbour's: the turn that says it ranks first.
    keyword_ids, _ = ranked(me, "Louvre museum", mode="keyword")
    assert keyword_ids[:2] == [question.pk, answer.pk]
    # The same answer outside a thread holds none of the question's words: not found.
    loose = put(me, "Ben: Yes, last week!", key="loose")
    assert loose.pk not in ranked(me, "Louvre museum", mode="keyword")[0]


@pytest.mark.django_db
def test_turns_arriving_out_of_order_keep_the_order_of_their_time(me):
    texts = ["Ana: first", "Ben: second", "Ana: third", "Ben: fourth"]
    a, b, c, d = turns(me, texts, order=[2, 0, 3, 1])
    assert links(a) == (None, b.pk, "Ben: second")
    assert links(b) == (a.pk, c.pk, "Ana: first Ana: third")
    assert links(c) == (b.pk, d.pk, "Ben: second Ben: fourth")
    assert links(d) == (c.pk, None, "Ana: third")
    # A corrected time moves a memory: `d` now happened first.
    memory_update(principal=me, memory_id=d.pk, data={"occurred_at": "2026-05-08T13:00:00Z"})
    assert links(d) == (None, a.pk, "Ana: first")
    assert links(a) == (d.pk, b.pk, "Ben: fourth Ben: second")
    assert links(c) == (b.pk, None, "Ben: second")
    # Without occurred_at, a turn takes its place by created_at (the store's time, T0, the time
    # of `a`: then by id, after it).
    e = put(me, "Ana: fifth", thread_id="session-1")
    assert links(e)[:2] == (a.pk, b.pk)
    assert links(b)[0] == e.pk


@pytest.mark.django_db
def test_a_forgotten_or_corrected_neighbours_words_no_longer_match(me):
    question, answer, *_ = turns(me, CONVERSATION)
    assert answer.pk in ranked(me, "Louvre", mode="keyword")[0]
    memory_update(
        principal=me, memory_id=question.pk, data={"text": "Ana: Did you visit the Prado?"}
    )
    assert answer.pk not in ranked(me, "Louvre", mode="keyword")[0]
    assert answer.pk in ranked(me, "Prado", mode="keyword")[0]
    memory_forget(principal=me, memory_id=question.pk, reason="wrong")
    assert ranked(me, "Prado", mode="keyword")[0] == []
    # The answer's neighbours close up around the gap.
    assert links(answer) == (None, Memory.objects.get(text=FILLER[0]).pk, FILLER[0])
    assert links(question) == (None, None, None)


@pytest.mark.django_db
def test_a_date_question_finds_the_memory_of_that_day(me):
    days = {}
    for day in (1, 8, 15, 22):
        days[day] = put(
            me,
            "Ana: We went to the farmers market and bought peaches.",
            occurred_at=datetime(2026, 4, day, 10, tzinfo=UTC).isoformat(),
        )
    put(me, "Ana: The farmers market had peaches again.")  # no time: never date-boosted
    for query in (
        "What did Ana buy at the market on 15 April 2026?",
        "What did Ana buy at the market on April 15, 2026?",
        "What did Ana buy at the market on 2026-04-15?",
    ):
        assert ranked(me, query)[0][0] == days[15].pk, query
    # Its time is its `context.when`.
    _, hits = ranked(me, "peaches on 15 April 2026")
    assert hits[0]["context"]["when"] == "2026-04-15T10:00:00.000000Z"


def test_query_dates_reads_days_and_months_and_leaves_the_modal_may():
    found = query_dates("What did Gina find on 1 February, 2023 and in July 2023, or in June?")
    assert list(zip(found.years, found.months, found.days, strict=True)) == [
        (2023, 2, 1),
        (2023, 7, None),
        (None, 6, None),
    ]
    assert not query_dates("May I ask what Maria said? We march on.")
    assert query_dates("on May 3, 2023").days == [3]


@pytest.mark.django_db
def test_a_memory_mentioning_the_person_the_query_names_ranks_higher(me):
    text = "Went hiking up the mountain trail on Sunday."
    ana = put(me, text, mentions=[{"name": "Ana Lima", "type": "person"}])
    ben = put(me, text, mentions=[{"name": "Ben", "type": "person"}])
    assert ranked(me, "Where did Ben go hiking?")[0][:2] == [ben.pk, ana.pk]
    assert ranked(me, "Where did Ana Lima go hiking?")[0][:2] == [ana.pk, ben.pk]
    # A name counts only with all its words: "Ana" alone is not "Ana Lima".
    plain = ranked(me, "Where did Ana go hiking?")[1]
    assert plain[0]["quality"]["relevance"] == plain[1]["quality"]["relevance"]


@pytest.mark.django_db
def test_memories_without_thread_or_time_rank_by_the_hybrid_formula_of_before(me):
    """b = (1.5 · cosine similarity clamped at 0 + keyword score / best keyword score) / 2.5,
    with the keyword score read back from keyword mode (relevance = s / (s + 3))."""
    for text in FILLER + CONVERSATION[:2]:
        put(me, text)
    query = "Did Ben visit the museum in Paris last week, or fix the bike?"
    semantic = {h["id"]: h["quality"]["relevance"] for h in ranked(me, query, "semantic")[1]}
    keyword = {h["id"]: h["quality"]["relevance"] for h in ranked(me, query, "keyword")[1]}
    scores = {mid: 3 * r / (1 - r) for mid, r in keyword.items()}
    best = max(scores.values())
    expected = {
        mid: (1.5 * semantic.get(mid, 0) + scores.get(mid, 0) / best) / 2.5
        for mid in semantic.keys() | keyword.keys()
    }
    hybrid = ranked(me, query)[1]
    assert {h["id"] for h in hybrid} == set(expected)
    for hit in hybrid:
        assert hit["quality"]["relevance"] == pytest.approx(expected[hit["id"]], abs=1e-5)
    order = [h["id"] for h in hybrid]
    assert order == sorted(expected, key=lambda mid: (-expected[mid], mid))


@pytest.mark.django_db
def test_occurred_at_is_taken_as_iso_or_unix_ms_on_store_and_patch(api_client):
    stored = api_client.post(
        "/api/v1/memories",
        {"text": "Ran the Lisbon half marathon", "occurred_at": 1_683_554_160_000},
        format="json",
    ).json()["memory"]
    assert stored["occurred_at"] == "2023-05-08T13:56:00.000000Z"
    changed = api_client.patch(
        f"/api/v1/memories/{stored['id']}",
        {"occurred_at": "2023-05-09T10:00:00+02:00"},
        format="json",
    ).json()["memory"]
    assert changed["occurred_at"] == "2023-05-09T08:00:00.000000Z"
    cleared = api_client.patch(
        f"/api/v1/memories/{stored['id']}", {"occurred_at": None}, format="json"
    ).json()["memory"]
    assert cleared["occurred_at"] is None
    refused = api_client.post(
        "/api/v1/memories", {"text": "x", "occurred_at": "last tuesday"}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["field"] == "occurred_at"

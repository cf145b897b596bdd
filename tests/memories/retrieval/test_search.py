"""Search (docs/api.md#search--post-apiv1search): modes, filters, isolation, lifetimes, isLatest,
the response format."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories import access
from memories.models import Memory, MemoryVector
from memories.retrieval import search as search_module
from memories.retrieval.search import memory_search
from memories.services.lifecycle import memory_forget
from memories.services.store import memory_store
from tests.factories import make_agent, make_tenant, seed_synthetic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TIMEOUT = 10  # seconds before a stuck flusher fails the test instead of hanging it

CORPUS = [
    ("colby", "My son Colby lives in Los Angeles and studies film."),
    ("coffee", "Prefers oat milk in coffee, never sugar."),
    ("dentist", "Dentist appointment is every six months at Dr. Ortega's clinic."),
    ("car", "Drives a blue 2019 Subaru Outback."),
    ("allergy", "Allergic to penicillin; carries an EpiPen for bee stings."),
    ("birthday", "Birthday is on the 14th of July."),
]


def put(principal, text, now=T0, **fields):
    body = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=body, now=now).memory


def search(principal, now=None, **body):
    return memory_search(principal=principal, data=body, now=now or T0 + timedelta(minutes=5))


def texts(result):
    return [hit["data"]["text"] for hit in result["memories"]]


@pytest.fixture
def me(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


@pytest.fixture
def corpus(me):
    return {key: put(me, text, key=key) for key, text in CORPUS}


@pytest.mark.django_db
def test_search_over_http_returns_the_llm_facing_format(api_client, agent):
    stored = api_client.post(
        "/api/v1/memories",
        {
            "text": "Prefers email over phone.",
            "key": "contact-pref",
            "kind": "preference",
            "data": {"channel": "email"},
            "tags": ["crm"],
            "confidence": 0.9,
            "mentions": [{"name": "Email", "type": "channel"}],
        },
        format="json",
    ).json()["memory"]
    response = api_client.post("/api/v1/search", {"query": "email or phone?"}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["success"] is True and body["ok"] is True
    assert body["searchedAt"].endswith("Z")
    [hit] = body["memories"]
    relevance = hit["quality"].pop("relevance")
    assert 0 < relevance <= 1
    assert hit == {
        "id": stored["id"],
        "key": "contact-pref",
        "kind": "preference",
        "category": "core",
        "quality": {"confidence": 0.9},
        "data": {"text": "Prefers email over phone.", "channel": "email"},
        "context": {
            "when": stored["updated_at"],
            "created_at": stored["created_at"],
            "updated_at": stored["updated_at"],
            "expires_at": None,
            "mentions": [{"name": "Email", "type": "channel"}],
            "tags": ["crm"],
            "isLatest": True,
            "lastConfirmedAt": stored["last_confirmed_at"],
        },
        "source": "own",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["hybrid", "semantic", "keyword"])
def test_each_mode_finds_the_matching_memory_first(me, corpus, mode):
    result = search(me, query="Where does Colby live?", mode=mode)
    assert result["memories"][0]["id"] == corpus["colby"].id
    scores = [hit["quality"]["relevance"] for hit in result["memories"]]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= s <= 1 for s in scores)


@pytest.mark.django_db
def test_keyword_mode_matches_any_lexeme_not_all(me, corpus):
    # "appointments" and "Ortega" are in the memory; "tomorrow" and "cancel" are not: an AND
    # query (plainto_tsquery) would find nothing.
    result = search(me, query="cancel tomorrow's appointments with Ortega", mode="keyword")
    assert [hit["id"] for hit in result["memories"]] == [corpus["dentist"].id]


@pytest.mark.django_db
def test_keyword_mode_returns_only_lexical_matches(me, corpus):
    assert search(me, query="penicillin", mode="keyword")["memories"][0]["id"] == (
        corpus["allergy"].id
    )
    assert len(search(me, query="penicillin", mode="keyword")["memories"]) == 1
    assert search(me, query="zeppelin", mode="keyword")["memories"] == []


@pytest.mark.django_db
def test_semantic_mode_always_returns_nearest_neighbours(me, corpus):
    result = search(me, query="zeppelin", mode="semantic", limit=3)
    assert len(result["memories"]) == 3


@pytest.mark.django_db
def test_stop_word_only_query_still_searches_semantically(me, corpus):
    assert search(me, query="the and of", mode="keyword")["memories"] == []
    assert len(search(me, query="the and of", mode="hybrid", limit=4)["memories"]) == 4


@pytest.mark.django_db
def test_hybrid_ranks_a_memory_matching_both_signals_first(me, corpus):
    result = search(me, query="blue Subaru", limit=6)
    assert result["memories"][0]["id"] == corpus["car"].id
    assert (
        result["memories"][0]["quality"]["relevance"]
        > result["memories"][1]["quality"]["relevance"]
    )


@pytest.mark.django_db
def test_limit_and_min_score(me, corpus):
    assert len(search(me, query="coffee", limit=2, mode="semantic")["memories"]) == 2
    strict = search(me, query="oat milk coffee", min_score=0.5)["memories"]
    assert [hit["id"] for hit in strict] == [corpus["coffee"].id]
    assert all(hit["quality"]["relevance"] >= 0.5 for hit in strict)


@pytest.mark.django_db
def test_filters_category_kind_tags(me):
    a = put(me, "Team standup is at nine.", category="daily", kind="event", tags=["work"])
    b = put(me, "Standup notes live in the wiki.", category="core", kind="fact", tags=["work"])
    c = put(me, "Standup moved to ten on Fridays.", category="daily", kind="fact", tags=["home"])

    def ids(**body):
        return {hit["id"] for hit in search(me, query="standup", **body)["memories"]}

    assert ids() == {a.id, b.id, c.id}
    assert ids(category="daily") == {a.id, c.id}
    assert ids(categories=["core", "workspace"]) == {b.id}
    assert ids(kind="fact") == {b.id, c.id}
    assert ids(tags=["work"]) == {a.id, b.id}
    assert ids(tags=["Work", "home"]) == set()
    assert ids(category="daily", kind="fact", tags=["home"]) == {c.id}


@pytest.mark.django_db
def test_never_returns_another_tenant_agent_or_subject(tenant, agent, me):
    other_tenant = make_tenant("globex")
    strangers = [
        Principal(tenant=other_tenant, agent=make_agent(other_tenant, "support-bot")),
        Principal(tenant=tenant, agent=make_agent(tenant, "sales-bot")),
    ]
    text = "The vault code is kept by the night manager."
    for stranger in strangers:
        for i in range(30):
            put(stranger, f"{text} ({i})", kind="secretish")
    put(me, text + " (subject bob)", subject_id="bob", kind="secretish")
    mine = put(me, text + " (mine)", kind="secretish")
    alice = put(me, text + " (subject alice)", subject_id="alice", kind="secretish")

    for mode in ("hybrid", "semantic", "keyword"):
        # A highly selective filter: only a few rows of the whole table pass it.
        hits = search(me, query="vault code", mode=mode, kind="secretish", limit=100)
        assert [hit["id"] for hit in hits["memories"]] == [mine.id]
        hits = search(me, query="vault code", mode=mode, subject_id="alice", limit=100)
        assert {hit["id"] for hit in hits["memories"]} == {mine.id, alice.id}


@pytest.mark.django_db
def test_selective_agent_filter_still_returns_k_rows(tenant, me):
    crowd = Principal(tenant=tenant, agent=make_agent(tenant, "crowd"))
    for i in range(200):
        put(crowd, f"Shipping note {i}: parcels leave the depot at dawn.")
    own = {put(me, f"Shipping rule {i}: parcels need a signature.").id for i in range(12)}
    for mode in ("semantic", "hybrid"):
        hits = search(me, query="parcels depot dawn", mode=mode, limit=10)["memories"]
        assert len(hits) == 10
        assert {hit["id"] for hit in hits} <= own


@pytest.mark.django_db
def test_expired_and_tombstoned_are_never_returned(me):
    live = put(me, "Gate code for the warehouse is on the badge.")
    put(me, "Gate code changes weekly.", ttl="1h")
    gone = put(me, "Gate code used to be written on the door.")
    memory_forget(principal=me, memory_id=gone.id, reason="wrong", now=T0)
    later = T0 + timedelta(hours=2)
    for mode in ("hybrid", "semantic", "keyword"):
        hits = search(me, query="gate code", mode=mode, now=later)["memories"]
        assert [hit["id"] for hit in hits] == [live.id]


@pytest.mark.django_db
def test_is_latest_and_history(me):
    first = put(me, "Favourite colour is green.", key="colour")
    second = put(me, "Favourite colour is purple.", key="colour", now=T0 + timedelta(minutes=1))
    assert first.id == second.id
    current = search(me, query="favourite colour")["memories"]
    assert [(h["data"]["text"], h["context"]["isLatest"]) for h in current] == [
        ("Favourite colour is purple.", True)
    ]
    both = search(me, query="favourite colour", include_history=True)["memories"]
    assert sorted((h["data"]["text"], h["context"]["isLatest"]) for h in both) == [
        ("Favourite colour is green.", False),
        ("Favourite colour is purple.", True),
    ]
    assert {h["id"] for h in both} == {first.id}


@pytest.mark.django_db
def test_shared_and_workspace_sources(tenant, agent, me):
    teacher = make_agent(tenant, "teacher")
    agent.reads_from.add(teacher)
    agent._reads_from_ids = None
    taught = Principal(tenant=tenant, agent=teacher)
    shared = put(taught, "Invoices are due on the first Monday.")
    put(taught, "Invoices chat in this run only.", category="conversation", thread_id="t1")
    workspace = put(me, "Invoices go to billing@acme.test.", category="workspace")
    me = Principal(tenant=tenant, agent=type(agent).objects.get(pk=agent.pk))

    hits = search(me, query="invoices", limit=10)["memories"]
    assert {h["id"]: h["source"] for h in hits} == {
        shared.id: "shared:teacher",
        workspace.id: "workspace",
    }
    alone = search(me, query="invoices", include_shared=False)["memories"]
    assert [h["id"] for h in alone] == [workspace.id]


@pytest.mark.django_db
def test_conversation_memories_only_for_their_thread(me):
    general = put(me, "Ticket 42 concerns a broken hinge.")
    in_run = put(me, "Ticket 42: customer sent photos.", category="conversation", thread_id="r1")
    put(me, "Ticket 42: other run.", category="conversation", thread_id="r2")
    assert [h["id"] for h in search(me, query="ticket 42")["memories"]] == [general.id]
    in_thread = search(me, query="ticket 42", thread_id="r1")["memories"]
    assert [h["id"] for h in in_thread] == [in_run.id]


@pytest.mark.django_db
def test_returned_rows_are_bumped_with_one_update(me, corpus):
    later = T0 + timedelta(hours=1)
    with CaptureQueriesContext(connection) as ctx:
        hits = search(me, query="coffee sugar", mode="keyword", now=later)["memories"]
    updates = [q for q in ctx.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1
    bumped = Memory.objects.get(pk=hits[0]["id"])
    assert bumped.access_count == 1 and bumped.last_accessed_at == later
    assert Memory.objects.get(pk=corpus["car"].id).access_count == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "query"),
        ({"query": "  "}, "query"),
        ({"query": 5}, "query"),
        ({"query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x", "limit": 101}, "limit"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "min_score": 2}, "min_score"),
        ({"query": "x", "tags": "Not A Tag!"}, "tags"),
        ({"query": "x", "include_shared": "maybe"}, "include_shared"),
        ({"query": "x", "category": "Bad Category"}, "category"),
        ({"query": "x", "lmit": 5}, "lmit"),
    ],
)
def test_invalid_input_names_the_field(api_client, body, field):
    response = api_client.post("/api/v1/search", body, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "INVALID_INPUT" and error["details"]["field"] == field


@pytest.mark.django_db
def test_scope_and_subject_binding(agent, key_client):
    write_only = key_client(agent, scopes=["write"])
    response = write_only.post("/api/v1/search", {"query": "x"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "SCOPE_DENIED"
    bound = key_client(agent, subject_id="alice")
    response = bound.post("/api/v1/search", {"query": "x", "subject_id": "bob"}, format="json")
    assert response.status_code == 403


@pytest.mark.django_db
def test_unauthenticated(client):
    response = client.post("/api/v1/search", {"query": "x"}, content_type="application/json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


class FlushGate:
    """The access bumper's wait between flushes, held by the test: its background flusher
    wakes when the test calls `open()` (or at the end), never because time has passed."""

    def __init__(self) -> None:
        self.asked: list[float] = []  # the waits the flusher asked for, in seconds
        self._turns = threading.Semaphore(0)
        self._done = False

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        if not self._done:
            assert self._turns.acquire(timeout=TIMEOUT), "the test never let the flusher go"

    def open(self) -> None:
        """Let the flusher through one wait."""
        self._turns.release()

    def close(self) -> None:
        """Let it through every wait from now on (the end of the test)."""
        self._done = True
        self._turns.release()


@pytest.fixture
def deferred(settings, monkeypatch):
    """Deferred access bumps (production's mode) into a bumper of the test's own, whose
    background flusher waits on a `FlushGate`: what it writes, it writes when the test says."""
    settings.MEMORYHUB_ACCESS_BUMP = "deferred"
    gate = FlushGate()
    bumper = access.Bumper(wait=gate)
    monkeypatch.setattr(access, "_bumper", bumper)
    yield SimpleNamespace(gate=gate, bumper=bumper)
    flusher = bumper._thread
    gate.close()
    if flusher is not None:
        flusher.join(TIMEOUT)
        assert not flusher.is_alive()


@pytest.mark.django_db
def test_deferred_access_bumps_are_merged_into_one_update(me, corpus, deferred):
    first, second = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    search(me, query="coffee sugar", mode="keyword", now=first)
    search(me, query="coffee sugar", mode="keyword", now=second)
    coffee = Memory.objects.get(pk=corpus["coffee"].id)
    assert coffee.access_count == 0  # nothing written inside the requests
    with CaptureQueriesContext(connection) as ctx:
        assert access.flush_access() == 1
    assert len(ctx.captured_queries) == 1
    coffee.refresh_from_db()
    assert coffee.access_count == 2 and coffee.last_accessed_at == second


@pytest.mark.django_db(transaction=True)  # the flusher's own connection sees the rows
def test_the_background_flusher_writes_merged_bumps_once_a_second_then_stops(me, deferred):
    """The loop production runs: a read starts the flusher, which waits its second, writes
    every bump of that second in one UPDATE on a connection of its own, and ends when no read
    came meanwhile; the next read starts a new one."""
    tenant = me.tenant
    memory = put(me, "Prefers oat milk in coffee.")
    first, second = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    access.bump_access(tenant.pk, [memory.id], second)
    access.bump_access(tenant.pk, [memory.id], first)
    flusher = deferred.bumper._thread
    assert flusher is not None and flusher.is_alive()
    memory.refresh_from_db()
    assert memory.access_count == 0  # the flusher is still waiting out its second

    deferred.gate.open()
    flusher.join(TIMEOUT)
    assert not flusher.is_alive()  # nothing more to write: it ended
    assert deferred.gate.asked == [1.0]
    memory.refresh_from_db()
    assert (memory.access_count, memory.last_accessed_at) == (2, second)

    access.bump_access(tenant.pk, [memory.id], second + timedelta(hours=1))
    again = deferred.bumper._thread
    assert again is not flusher and again.is_alive()
    deferred.gate.open()
    again.join(TIMEOUT)
    assert not again.is_alive()
    memory.refresh_from_db()
    assert (memory.access_count, memory.last_accessed_at) == (3, second + timedelta(hours=1))


def _hot_updates() -> tuple[int, int]:
    """This transaction's updates of the memories table so far: (all, heap-only)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
            "WHERE relname = 'memories_memory'"
        )
        return cursor.fetchone()


# Committed rows and a VACUUM first: the room a bump finds on its page is then the table's
# own (fillfactor, as autovacuum keeps it), not what earlier tests' rolled-back rows happened
# to leave on the pages this backend inserts into.
@pytest.mark.django_db(transaction=True)
def test_access_bumps_are_heap_only_updates(me, corpus, deferred):
    """A bump changes no indexed column and finds room on its page: PostgreSQL writes no index
    entry for it (not the HNSW graph, not the GIN index), which is what keeps reads cheap."""
    with connection.cursor() as cursor:
        cursor.execute("VACUUM memories_memory")
    search(me, query="coffee sugar blue Subaru", mode="keyword", now=T0 + timedelta(hours=1))
    with transaction.atomic():  # the counters below are this transaction's
        updates, hot = _hot_updates()
        assert access.flush_access() >= 2
        after_updates, after_hot = _hot_updates()
    assert after_updates - updates >= 2
    assert after_hot - hot == after_updates - updates
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'memories_memory'")
        assert "fillfactor=75" in cursor.fetchone()[0]
        cursor.execute(
            "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = 'memories_memory'::regclass "
            "AND a.attname IN ('last_accessed_at', 'access_count')"
        )
        assert cursor.fetchall() == []


@pytest.mark.django_db
def test_stored_words_go_straight_into_the_full_text_indexes(me):
    """No GIN pending list: a stored memory's lexemes are in the index at once, so a keyword
    search never reads a list of not-yet-merged entries first (`fastupdate=False`)."""
    indexes = ["memory_fts_owner_idx", "memory_fts_workspace_idx"]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s) ORDER BY 1",
            [indexes],
        )
        assert cursor.fetchall() == [(name, ["fastupdate=off"]) for name in indexes]
    put(me, "The orchard by the river floods every spring")
    put(me, "Team handbook: the river path is closed", category="workspace")
    assert texts(search(me, query="river orchard", mode="keyword"))
    with connection.cursor() as cursor:
        for name in indexes:
            # The number of pending-list pages it had to merge: none.
            cursor.execute("SELECT gin_clean_pending_list(%s::regclass)", [name])
            assert cursor.fetchone() == (0,), name


@pytest.mark.django_db
def test_keyword_matches_are_read_from_each_owners_part_of_the_index(tenant, me):
    """The keyword branch's index scan is keyed by the agent (and, for workspace memories, by
    the tenant): it does not read another agent's matches to throw them away."""
    with connection.cursor() as cursor:
        # Not what this test reads, and the slowest index to keep up row by row (rolled back
        # with the test's transaction).
        cursor.execute("DROP INDEX memory_vector_hnsw")
    crowd = [make_agent(tenant, f"crowd-{i}") for i in range(9)]
    seed_synthetic(tenant, [me.agent, *crowd], 1500)
    statements = []

    def capture(execute, sql, params, many, context):
        if sql.lstrip().startswith("WITH"):
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")
    with connection.execute_wrapper(capture):
        assert texts(search(me, query="what did alice say about the hiking boots", mode="keyword"))
    (sql, params), *_ = statements
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (COSTS OFF) " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "Bitmap Index Scan on memory_fts_owner_idx" in plan, plan
    assert "Bitmap Index Scan on memory_fts_workspace_idx" in plan, plan
    assert f"(agent_id = '{me.agent.pk}'::bigint) AND (search_vector @@" in plan, plan


@pytest.mark.django_db
def test_vectors_of_another_model_are_not_compared(me, corpus):
    Memory.objects.filter(pk=corpus["car"].id).update(embedding_model="some-other-model")
    MemoryVector.objects.filter(memory_id=corpus["car"].id).update(model="some-other-model")
    semantic = search(me, query="blue Subaru", mode="semantic", limit=10)["memories"]
    assert corpus["car"].id not in {hit["id"] for hit in semantic}
    # Full text still finds it, and hybrid keeps it on its keyword score alone.
    hybrid = search(me, query="blue Subaru", limit=10)["memories"]
    assert hybrid[0]["id"] == corpus["car"].id


@pytest.mark.django_db
def test_short_index_walk_falls_back_to_an_exact_scan(tenant, me, monkeypatch):
    monkeypatch.setattr(search_module, "EXACT_SCOPE", 0)  # the HNSW walk first, whatever the size
    crowd = Principal(tenant=tenant, agent=make_agent(tenant, "crowd"))
    for i in range(150):
        put(crowd, f"Shipping note {i}: parcels leave the depot at dawn.")
    own = [put(me, f"Shipping rule {i}: parcels need a signature.").id for i in range(12)]
    expected = search(me, query="parcels depot dawn", mode="semantic", limit=10)["memories"]
    with connection.cursor() as cursor:
        # Make the planner take the HNSW index and let its walk give up almost at once.
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL hnsw.max_scan_tuples = 1")
    with CaptureQueriesContext(connection) as ctx:
        hits = search(me, query="parcels depot dawn", mode="semantic", limit=10)["memories"]
    assert [h["id"] for h in hits] == [h["id"] for h in expected]
    assert len(hits) == 10 and {h["id"] for h in hits} <= set(own)
    rankings = [q for q in ctx.captured_queries if q["sql"].startswith("WITH")]
    assert len(rankings) == 2  # the HNSW walk came back short, the exact scan completed it

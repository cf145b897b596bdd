"""Console conversations (docs/console.md): Threads page, thread detail, `Run extraction`, evidence
next to extracted memories, extraction runs on the Jobs page, formation policy and budget."""

from __future__ import annotations

import re
from datetime import timedelta
from functools import partial

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Extraction
from memories.console import thread_selectors as tsel
from memories.models import ExtractionRun, Memory, Message, ReviewState, RunState, Thread
from tests.factories import make_agent, make_operator
from tests.support.formation import add_op as formed_add_op
from tests.support.memories import ingest

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
TOKEN = "ghp_" + "aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"


# The console's runs form memories below the review line unless a test says otherwise.
add_op = partial(formed_add_op, confidence=0.6)


def run_of(thread, state, **fields) -> ExtractionRun:
    return ExtractionRun.objects.create(
        tenant_id=thread.tenant_id, thread=thread, agent_id=thread.agent_id, state=state, **fields
    )


def extracted(agent, *contents, thread_id="t-1", **ingest_extra):
    """A thread of `contents`, and its run executed (the scripted model answers it)."""
    from memories.formation.runs import run_execute, run_request

    thread = ingest(agent, *contents, thread_id=thread_id, **ingest_extra)
    run = run_request(thread=thread, trigger="console")
    return thread, run_execute(run.pk)


@pytest.fixture
def threads_in_every_state(agent, settings):
    """One thread per extraction state, named after it (an LLM configured: none is called)."""
    settings.MEMORYHUB_LLM_URL = "http://127.0.0.1:9/v1"
    now = timezone.now()
    out = {}
    out["idle"] = ingest(agent, "waiting", thread_id="idle")
    out["off"] = ingest(
        make_agent(agent.tenant, "quiet-bot", extraction="off"), "x", thread_id="off"
    )
    scheduled = ingest(agent, "soon", thread_id="scheduled")
    Thread.objects.filter(pk=scheduled.pk).update(extraction_due_at=now + timedelta(minutes=2))
    out["scheduled"] = scheduled
    running = ingest(agent, "on it", thread_id="running")
    run_of(running, RunState.QUEUED)
    out["running"] = running
    failed = ingest(agent, "broken", thread_id="failed")
    run_of(failed, RunState.DONE, created_at=now - timedelta(hours=1))
    run_of(failed, RunState.FAILED, error_class="LLMUnavailable", error_message="503 thrice")
    # New messages were scheduled since: the last run's failure still shows.
    Thread.objects.filter(pk=failed.pk).update(extraction_due_at=now)
    out["failed"] = failed
    deferred = ingest(agent, "over budget", thread_id="deferred")
    run_of(deferred, RunState.DEFERRED)
    Thread.objects.filter(pk=deferred.pk).update(extraction_due_at=now + timedelta(hours=5))
    out["deferred"] = deferred
    done = ingest(agent, "all good", thread_id="done")
    run_of(done, RunState.DONE, prompt_tokens=300, completion_tokens=45)
    run_of(done, RunState.DONE, prompt_tokens=200, completion_tokens=5)
    Thread.objects.filter(pk=done.pk).update(extracted_seq=1, memories_added=2, memories_updated=1)
    out["done"] = done
    return out


# --- Threads page ----------------------------------------------------------------------------


def test_threads_page_and_its_htmx_fragment(owner_client, agent):
    ingest(agent, "hello", "hi there", thread_id="conv-42", subject_id="user-7")
    page = owner_client.get("/console/threads/").content.decode()
    assert page.startswith("<!doctype html>") and 'id="thread-table"' in page
    assert 'href="/console/threads/" aria-current="page">Threads</a>' in page  # navigation
    fragment = owner_client.get("/console/threads/", **HX).content.decode()
    assert "<html" not in fragment and fragment.strip().startswith('<div id="thread-table"')
    assert "conv-42" in fragment and "user-7" in fragment and "support-bot" in fragment


def test_threads_page_shows_each_state_and_filters_by_it(owner_client, threads_in_every_state):
    body = owner_client.get("/console/threads/").content.decode()
    for state in ("idle", "off", "scheduled", "failed", "deferred", "done"):
        assert f'data-thread-state="{state}">{state}<' in body
    assert "pending<" not in body
    assert 'data-thread-state="queued">queued<' in body  # filtered as running
    for state, thread in threads_in_every_state.items():
        body = owner_client.get(f"/console/threads/?state={state}", **HX).content.decode()
        assert body.count("data-thread-row=") == 1, state
        assert f'data-thread-row="{thread.thread_id}"' in body


def test_without_an_llm_the_threads_page_says_disabled_as_the_api_does(
    owner_client, agent, key_client
):
    waiting = ingest(agent, "nobody extracts this", thread_id="waiting")
    running = ingest(agent, "on it", thread_id="running")
    run_of(running, RunState.QUEUED)
    body = owner_client.get("/console/threads/").content.decode()
    assert 'data-thread-state="disabled">disabled<' in body
    assert 'data-thread-state="queued">queued<' in body  # an open run still shows
    api = key_client(agent).get("/api/v1/threads/waiting").json()
    assert api["thread"]["extraction"]["state"] == "disabled"
    filtered = owner_client.get("/console/threads/?state=disabled", **HX).content.decode()
    assert filtered.count("data-thread-row=") == 1 and waiting.thread_id in filtered


def test_threads_page_columns_count_messages_pending_memories_and_tokens(
    owner_client, threads_in_every_state
):
    done = threads_in_every_state["done"]
    ingest(done.agent, "one more", "and another", thread_id="done")
    body = owner_client.get("/console/threads/?thread=done", **HX).content.decode()
    row = body[body.index('data-thread-row="done"') :]
    cells = [c.split(">", 1)[1].split("<", 1)[0].strip() for c in row.split("<td")[1:10]]
    # thread, agent, subject, messages, pending, last message, state, memories, tokens
    assert cells[1] == "support-bot" and cells[3:5] == ["3", "2"]
    assert "2 / 1" in row and ">550</td>" in row


def test_threads_page_filters_by_agent_and_subject(owner_client, agent):
    sales = make_agent(agent.tenant, "sales-bot")
    ingest(agent, "a", thread_id="support-thread", subject_id="alice")
    ingest(agent, "b", thread_id="support-bob", subject_id="bob")
    ingest(sales, "c", thread_id="sales-thread", subject_id="alice")
    body = owner_client.get("/console/threads/?agent=sales-bot", **HX).content.decode()
    assert "sales-thread" in body and "support-thread" not in body
    body = owner_client.get("/console/threads/?subject=alice", **HX).content.decode()
    assert "sales-thread" in body and "support-thread" in body and "support-bob" not in body
    body = owner_client.get("/console/threads/?state=nonsense&subject=%00", **HX)
    assert body.status_code == 200


def test_threads_page_newest_activity_first_and_keyset_walk(owner_client, agent):
    threads = [ingest(agent, f"m{i}", thread_id=f"t{i}") for i in range(7)]
    # Activity in t2 makes it the newest.
    ingest(agent, "later", thread_id="t2")
    page = tsel.thread_page(tenant=agent.tenant, filters={}, size=3)
    assert page.items[0].thread_id == "t2" and page.total == 7
    seen, cursor = [], None
    for _ in range(5):
        page = tsel.thread_page(tenant=agent.tenant, filters={}, cursor=cursor, size=3)
        seen += [t.pk for t in page.items]
        cursor = page.next_cursor
        if not cursor:
            break
    assert sorted(seen) == sorted(t.pk for t in threads)


def test_threads_page_runs_a_fixed_number_of_queries(
    owner_client, agent, threads_in_every_state, django_assert_num_queries
):
    # session, user, membership (+ tenant), agents for the filter, the page of threads (with
    # agent, latest run state and tokens), the bounded count
    with django_assert_num_queries(6):
        owner_client.get("/console/threads/")
    other = make_agent(agent.tenant, "sales-bot")
    for i in range(20):
        thread = ingest(other if i % 2 else agent, f"more {i}", thread_id=f"more-{i}")
        run_of(thread, RunState.DONE, prompt_tokens=10)
    Thread.objects.filter(thread_id__startswith="more-").update(extracted_seq=F("last_seq"))
    with django_assert_num_queries(6):
        body = owner_client.get("/console/threads/?state=done").content.decode()
    assert body.count("data-thread-row=") == 21


def test_threads_page_never_shows_another_tenants_threads(owner_client, agent, other_tenant):
    ingest(make_agent(other_tenant, "spy-bot"), "Globex plan", thread_id="globex-thread")
    ingest(agent, "Acme plan", thread_id="acme-thread")
    response = owner_client.get("/console/threads/")
    assert response.status_code == 200
    body = response.content.decode()
    assert body.count("data-thread-row=") == 1 and 'data-thread-row="acme-thread"' in body
    assert "globex-thread" not in body and "spy-bot" not in body
    # Filtered to the other tenant's agent or thread: nothing (not their rows).
    for query in ("agent=spy-bot", "thread=globex-thread"):
        response = owner_client.get(f"/console/threads/?{query}", **HX)
        assert response.status_code == 200 and 'id="thread-table"' in response.content.decode()
        assert "data-thread-row=" not in response.content.decode(), query


# --- thread detail ---------------------------------------------------------------------------


def test_thread_detail_shows_messages_escaped_with_redaction_badges_and_summary(
    owner_client, agent
):
    thread = ingest(
        agent,
        "<script>alert('x')</script> hello",
        f"my token is {TOKEN}",
        "**not markdown**",
        thread_id="conv-1",
    )
    Thread.objects.filter(pk=thread.pk).update(summary="The user <b>said</b> hello.")
    url = f"/console/threads/{thread.pk}/"
    page = owner_client.get(url).content.decode()
    assert page.startswith("<!doctype html>") and 'id="thread-panel"' in page
    fragment = owner_client.get(url, **HX).content.decode()
    assert "<html" not in fragment and fragment.strip().startswith('<div id="thread-panel"')
    assert (
        "<script>alert" not in page and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    )
    assert "**not markdown**" in page  # plain text, never rendered
    assert TOKEN not in page and "[redacted:github_token]" in page
    assert page.count("data-redacted") == 1 and "redacted: github_token</span>" in page
    assert "The user &lt;b&gt;said&lt;/b&gt; hello." in page
    seqs = [int(s) for s in _attr_values(page, "data-message-seq")]
    assert seqs == [1, 2, 3]


def _attr_values(html: str, name: str) -> list[str]:
    return re.findall(rf'{name}="([^"]*)"', html)


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_thread_detail_pages_long_threads(owner_client, agent):
    ingest(agent, *[f"message {i}" for i in range(100)], thread_id="long")
    thread = ingest(agent, *[f"more {i}" for i in range(20)], thread_id="long")
    page = owner_client.get(f"/console/threads/{thread.pk}/").content.decode()
    seqs = [int(s) for s in _attr_values(page, "data-message-seq")]
    assert seqs == list(range(1, tsel.MESSAGE_PAGE_SIZE + 1))
    link = _attr_values(page, "hx-get")[-1].replace("&amp;", "&")
    assert link.startswith("?cursor=")
    rest = owner_client.get(f"/console/threads/{thread.pk}/{link}", **HX).content.decode()
    assert [int(s) for s in _attr_values(rest, "data-message-seq")] == list(range(101, 121))


def test_thread_detail_lists_runs_with_tokens_outcomes_errors_and_memories_made(
    owner_client, agent, fake_llm
):
    fake_llm.queue_json(
        {
            "operations": [
                add_op("The user is vegetarian", evidence=[1], confidence=0.95),
                add_op("The user hates cilantro", evidence=[3], confidence=0.6),
            ]
        },
        usage=(812, 47),
    )
    thread, run = extracted(agent, "I am vegetarian", "Noted", "and I hate cilantro")
    assert run.state == RunState.DONE
    ingest(agent, "one more thing", thread_id="t-1")
    fake_llm.queue_error(400)  # not retried: the run fails at once
    from memories.formation.runs import run_execute, run_request

    failed = run_execute(run_request(thread=thread, trigger="console").pk)
    assert failed.state == RunState.FAILED
    page = owner_client.get(f"/console/threads/{thread.pk}/").content.decode()
    runs = page[page.index('id="thread-runs"') :]
    assert runs.index(f'data-run="{failed.pk}"') < runs.index(f'data-run="{run.pk}"')  # newest 1st
    assert "812 / 47" in runs and "#1–#3" in runs and "console" in runs
    assert f'<span class="mono">{run.model}</span>' in runs and run.model
    assert '<span class="mono">added</span> 2' in runs
    assert '<span class="mono">pending_review</span> 1' in runs
    assert 'data-run-error><span class="mono">LLMRequestError</span>' in runs
    vegetarian = Memory.objects.get(text="The user is vegetarian")
    cilantro = Memory.objects.get(text="The user hates cilantro")
    assert f'href="/console/memories/{vegetarian.pk}/"' in runs
    assert f'href="/console/memories/{cilantro.pk}/"' in runs
    made = runs[runs.index(f'aria-label="Memories made by run #{run.pk}"') :]
    assert made.index("vegetarian") < made.index('chip-pending">pending')  # cilantro waits


def test_thread_detail_runs_a_fixed_number_of_queries(
    owner_client, agent, store_memory, django_assert_num_queries
):
    thread = ingest(agent, "hello", thread_id="busy")
    run_of(thread, RunState.DONE)
    url = f"/console/threads/{thread.pk}/"
    # session, user, membership (+ tenant), the thread (with agent, state and tokens), its
    # messages, its runs, the memories those runs made
    with django_assert_num_queries(7):
        owner_client.get(url)
    ingest(agent, *[f"message {i}" for i in range(30)], thread_id="busy")
    for i in range(8):
        run = run_of(thread, RunState.DONE, prompt_tokens=i)
        memory = store_memory(agent, f"made by run {i}")
        Memory.objects.filter(pk=memory.pk).update(
            evidence={"thread_id": "busy", "messages": [i + 1], "run_id": run.pk}
        )
    with django_assert_num_queries(7):
        body = owner_client.get(url).content.decode()
    assert len(re.findall(r">made by run \d</a>", body)) == 8
    assert body.count("data-message-seq=") == 31


def test_thread_detail_of_another_tenant_is_404(owner_client, other_tenant):
    thread = ingest(make_agent(other_tenant, "spy-bot"), "Globex plan")
    response = owner_client.get(f"/console/threads/{thread.pk}/")
    assert response.status_code == 404 and b"Globex" not in response.content
    assert owner_client.get("/console/threads/999999/").status_code == 404


# --- Run extraction --------------------------------------------------------------------------


def test_run_extraction_queues_a_run_and_shows_it(
    reviewer_client, agent, fake_llm, django_capture_on_commit_callbacks
):
    fake_llm.queue_json({"operations": [add_op("The user likes tea", evidence=[1])]})
    thread = ingest(agent, "I like tea", "Good to know")
    url = f"/console/threads/{thread.pk}/"
    page = reviewer_client.get(url).content.decode()
    assert ">Run extraction</button>" in page and "2 messages wait for extraction" in page
    with django_capture_on_commit_callbacks(execute=True):
        response = reviewer_client.post(f"{url}extract/", **HX)
    body = response.content.decode()
    assert response.status_code == 200 and body.strip().startswith('<div id="thread-panel"')
    run = ExtractionRun.objects.get(thread=thread)
    assert f"Extraction run #{run.pk}: queued." in body  # the cluster ran it on commit
    assert run.trigger == "console"
    run.refresh_from_db()
    assert run.state == RunState.DONE and run.counts["pending_review"] == 1
    page = reviewer_client.get(url).content.decode()
    assert f'data-run="{run.pk}"' in page and "data-run-state>done<" in page
    assert "The user likes tea" in page
    memory = Memory.objects.get(text="The user likes tea")
    assert memory.review_state == ReviewState.PENDING
    # Without HTMX: post/redirect/get, the run's state flashed.
    ingest(agent, "and biscuits")
    response = reviewer_client.post(f"{url}extract/")
    assert response.status_code == 302 and response["Location"] == url
    assert b"Extraction run #" in reviewer_client.get(url).content


def test_run_extraction_without_an_llm_says_so_and_queues_nothing(reviewer_client, agent):
    thread = ingest(agent, "hello")
    url = f"/console/threads/{thread.pk}/"
    page = reviewer_client.get(url).content.decode()
    assert ">Run extraction</button>" not in page
    assert "No LLM is configured (MEMORYHUB_LLM_URL is not set)" in page
    response = reviewer_client.post(f"{url}extract/", **HX)
    assert response.status_code == 409 and "No LLM is configured" in response.content.decode()
    response = reviewer_client.post(f"{url}extract/")
    assert response.status_code == 302
    assert not ExtractionRun.objects.exists()


def test_run_extraction_when_the_agent_has_extraction_off(login, tenant, agent, fake_llm):
    admin = login(make_operator(tenant, "admin@acme.test", "admin").user)
    agent.extraction = Extraction.OFF
    agent.save()
    thread = ingest(agent, "hello")
    url = f"/console/threads/{thread.pk}/"
    page = admin.get(url).content.decode()
    assert "Extraction is off for support-bot" in page and ">Run extraction</button>" not in page
    assert f'href="/console/agents/{agent.slug}/">Agent policy</a>' in page
    response = admin.post(f"{url}extract/", **HX)
    assert response.status_code == 409 and "Extraction is off" in response.content.decode()
    assert not ExtractionRun.objects.exists()


def test_run_extraction_with_nothing_waiting_says_so(reviewer_client, agent, fake_llm):
    thread = ingest(agent, "hello")
    Thread.objects.filter(pk=thread.pk).update(extracted_seq=1)
    page = reviewer_client.get(f"/console/threads/{thread.pk}/").content.decode()
    assert ">Run extraction</button>" not in page
    assert "Every message has been through an extraction." in page
    response = reviewer_client.post(f"/console/threads/{thread.pk}/extract/", **HX)
    assert response.status_code == 409 and "Nothing to extract" in response.content.decode()
    assert not ExtractionRun.objects.exists()


def test_run_extraction_needs_csrf(reviewer, agent, fake_llm):
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    thread = ingest(agent, "hello")
    assert client.post(f"/console/threads/{thread.pk}/extract/").status_code == 403
    assert not ExtractionRun.objects.exists()


# --- evidence next to extracted memories -----------------------------------------------------


def test_memory_detail_shows_the_evidence_messages_and_links_the_thread(
    owner_client, agent, fake_llm
):
    fake_llm.queue_json({"operations": [add_op("The user moved to Lisbon", evidence=[1, 3])]})
    thread, _ = extracted(
        agent, "I moved to Lisbon <b>last</b> year", "Nice!", f"token {TOKEN} in Lisbon"
    )
    memory = Memory.objects.get()
    page = owner_client.get(f"/console/memories/{memory.pk}/").content.decode()
    evidence = page[page.index("data-evidence") :]
    assert [int(s) for s in _attr_values(evidence, "data-message-seq")] == [1, 3]
    assert "I moved to Lisbon &lt;b&gt;last&lt;/b&gt; year" in evidence and "Nice!" not in evidence
    assert "redacted: github_token" in evidence and TOKEN not in page
    assert f'href="/console/threads/{thread.pk}/" data-evidence-thread' in evidence
    assert f'<a href="/console/threads/{thread.pk}/">t-1</a>' in page  # the Thread field too


def test_evidence_of_deleted_messages_says_so(owner_client, agent, fake_llm):
    fake_llm.queue_json({"operations": [add_op("The user likes jazz", evidence=[1])]})
    thread, _ = extracted(agent, "I like jazz")
    Message.objects.filter(thread=thread).delete()
    memory = Memory.objects.get()
    page = owner_client.get(f"/console/memories/{memory.pk}/").content.decode()
    assert "1 cited message no longer stored" in page


def test_explicit_memories_show_no_evidence(owner_client, agent, store_memory):
    memory = store_memory(agent, "Stored on purpose")
    response = owner_client.get(f"/console/memories/{memory.pk}/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Stored on purpose" in page and 'id="memory-panel"' in page
    assert "data-evidence" not in page


def test_review_queue_shows_evidence_in_a_fixed_number_of_queries(
    reviewer_client, agent, store_memory
):
    def add(n: int, offset: int) -> None:
        for i in range(offset, offset + n):
            thread = ingest(agent, f"evidence message {i}", "reply", thread_id=f"t{i}")
            run = run_of(thread, RunState.DONE, from_seq=1, to_seq=2)
            memory = store_memory(agent, f"inferred fact {i}", capture_mode="inferred")
            Memory.objects.filter(pk=memory.pk).update(
                evidence={"thread_id": f"t{i}", "messages": [1], "run_id": run.pk}
            )

    add(2, 0)
    store_memory(agent, "inferred without evidence", capture_mode="inferred")
    small = _queries(reviewer_client, "/console/review/")
    add(10, 2)
    assert _queries(reviewer_client, "/console/review/") == small
    body = reviewer_client.get("/console/review/").content.decode()
    assert body.count("data-evidence ") == 12
    for i in range(12):
        assert f"evidence message {i}<" in body
    assert "reply" not in body


def test_evidence_for_reads_every_memory_in_one_query(
    agent, store_memory, django_assert_num_queries
):
    def inferred(text, run, seqs):
        memory = store_memory(agent, text, capture_mode="inferred")
        evidence = {"thread_id": run.thread.thread_id, "messages": seqs, "run_id": run.pk}
        Memory.objects.filter(pk=memory.pk).update(evidence=evidence)
        return Memory.objects.get(pk=memory.pk)

    memories = []
    for i in range(4):
        thread = ingest(agent, f"msg {i}-1", f"msg {i}-2", f"msg {i}-3", thread_id=f"t{i}")
        memories.append(inferred(f"fact {i}", run_of(thread, RunState.DONE), [1, 3]))
    # A later run of the same thread citing the same message: each memory gets its own.
    later = inferred("fact 0, later", run_of(Thread.objects.get(thread_id="t0"), "done"), [1])
    with django_assert_num_queries(1):
        evidence = tsel.evidence_for(tenant=agent.tenant, memories=[*memories, later])
    for i, memory in enumerate(memories):
        assert [m.content for m in evidence[memory.pk].messages] == [f"msg {i}-1", f"msg {i}-3"]
    assert [m.content for m in evidence[later.pk].messages] == ["msg 0-1"]


# --- Jobs page, policy, budget ---------------------------------------------------------------


def test_jobs_page_lists_the_tenants_extraction_runs(
    owner_client, agent, other_tenant, threads_in_every_state
):
    ingest(make_agent(other_tenant, "spy-bot"), "Globex", thread_id="globex-thread")
    run_of(Thread.objects.get(thread_id="globex-thread"), RunState.FAILED, error_class="Spy")
    body = owner_client.get("/console/jobs/").content.decode()
    section = body[body.index('id="extraction-runs"') :]
    assert "Extraction runs" in section
    failed = threads_in_every_state["failed"]
    assert f'href="/console/threads/{failed.pk}/"' in section
    assert '<span class="mono">LLMUnavailable</span>: 503 thrice' in section
    assert "globex-thread" not in body and "Spy" not in body
    assert "Tokens spent today (UTC): <strong>550</strong>" in section


def test_agent_policy_edits_the_extraction_fields(login, admin_user, agent):
    client = login(admin_user)
    page = client.get(f"/console/agents/{agent.slug}/").content.decode()
    for label in (
        "Extraction",
        "Extract after idle (seconds)",
        "Review below",
        "Minimum confidence",
        "Operations per answer",
    ):
        assert f">{label}</label>" in page
    data = {
        "entry_cap": 50,
        "hydration_budget_bytes": 4000,
        "default_category": "daily",
        "dedup_threshold": 0.8,
        "extraction": "review",
        "extraction_idle_seconds": 30,
        "extraction_min_confidence": 0.4,
        "review_below": 0.9,
        "extraction_categories": "Core, preferences, core",
        "summary_threshold_bytes": 8000,
        "extraction_max_operations": 20,
    }
    response = client.post(f"/console/agents/{agent.slug}/", data)
    assert response.status_code == 302
    agent.refresh_from_db()
    policy = agent.policy()
    assert (policy["extraction"], policy["extraction_idle_seconds"]) == ("review", 30)
    assert (policy["extraction_min_confidence"], policy["review_below"]) == (0.4, 0.9)
    assert policy["extraction_categories"] == ["core", "preferences"]
    assert policy["summary_threshold_bytes"] == 8000
    assert policy["extraction_max_operations"] == 20
    # Fields left out keep their values; bad ones are refused on the form.
    del data["extraction"], data["review_below"]
    response = client.post(
        f"/console/agents/{agent.slug}/",
        {
            **data,
            "extraction_categories": "",
            "summary_threshold_bytes": 10,
            "extraction_max_operations": 1001,
        },
    )
    assert response.status_code == 422
    body = response.content.decode()
    assert "Name at least one category, or turn extraction off." in body
    assert "greater than or equal to 1000" in body
    assert "less than or equal to 1000" in body
    agent.refresh_from_db()
    assert (agent.extraction, agent.review_below, agent.summary_threshold_bytes) == (
        "review",
        0.9,
        8000,
    )


def test_admin_sets_the_daily_extraction_budget(login, admin_user, reviewer_client, tenant):
    response = reviewer_client.post("/console/extraction-budget/", {"tokens": 5})
    assert response.status_code == 403
    client = login(admin_user)
    page = client.get("/console/agents/").content.decode()
    assert 'id="extraction-budget"' in page and ">Save budget</button>" in page
    response = client.post("/console/extraction-budget/", {"tokens": 250000})
    assert response.status_code == 302 and response["Location"] == "/console/agents/"
    tenant.refresh_from_db()
    assert tenant.extraction_daily_token_budget == 250000
    assert b"Daily extraction budget: 250000 tokens." in client.get("/console/agents/").content
    response = client.post("/console/extraction-budget/", {"tokens": -1})
    assert response.status_code == 302
    assert b"Budget not saved" in client.get("/console/agents/").content
    tenant.refresh_from_db()
    assert tenant.extraction_daily_token_budget == 250000
    assert (
        "250000 LLM tokens per UTC day" in reviewer_client.get("/console/agents/").content.decode()
    )


def test_tenant_extraction_budget_update_refuses_nonsense(tenant):
    from accounts.services import tenant_extraction_budget_update
    from memoryhub.errors import InvalidInput

    for bad in (-1, 1.5, "10", True):
        with pytest.raises(InvalidInput):
            tenant_extraction_budget_update(tenant=tenant, tokens=bad)
    assert (
        tenant_extraction_budget_update(tenant=tenant, tokens=0).extraction_daily_token_budget == 0
    )

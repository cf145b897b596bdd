"""Console pages and actions: fragments vs pages, fixed query counts, corrections, XSS."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import ApiKey, Membership
from memories.console import memory_selectors as sel
from memories.models import ChangeType, Memory, MemoryRevision, ReviewState, Status
from tests.factories import make_agent, make_operator

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
        assert response.status_code == 200, url
    return len(ctx.captured_queries)


# --- pages and fragments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fragment_id"),
    [
        ("/console/", 'id="dashboard-body"'),
        ("/console/memories/", 'id="memory-table"'),
        ("/console/review/", 'id="review-list"'),
        ("/console/tombstones/", 'id="tombstone-table"'),
        ("/console/activity/", 'id="activity-table"'),
        ("/console/jobs/", 'id="job-runs"'),
    ],
)
def test_htmx_requests_get_fragments_and_full_loads_get_pages(
    owner_client, agent, store_memory, url, fragment_id
):
    store_memory(agent, "Something to show", capture_mode="inferred")
    page = owner_client.get(url).content.decode()
    assert page.startswith("<!doctype html>") and "<html" in page and fragment_id in page
    assert 'hx-headers=\'{"X-CSRFToken": "' in page
    fragment = owner_client.get(url, **HX).content.decode()
    assert "<html" not in fragment and '<nav class="sidenav"' not in fragment
    assert fragment.strip().startswith("<") and fragment_id in fragment


def test_detail_fragment_for_htmx(owner_client, agent, store_memory):
    memory = store_memory(agent, "Detail fragment")
    url = f"/console/memories/{memory.pk}/"
    assert "<html" in owner_client.get(url).content.decode()
    fragment = owner_client.get(url, **HX).content.decode()
    assert "<html" not in fragment and 'id="memory-panel"' in fragment
    assert "Detail fragment" in fragment


def test_detail_shows_when_the_event_occurred(owner_client, agent, store_memory):
    timed = store_memory(agent, "Flew to Lisbon", occurred_at="2026-05-08T13:56:00Z")
    untimed = store_memory(agent, "Likes window seats")

    shown = owner_client.get(f"/console/memories/{timed.pk}/", **HX).content.decode()
    empty = owner_client.get(f"/console/memories/{untimed.pk}/", **HX).content.decode()

    assert "<dt>Occurred</dt><dd>2026-05-08 13:56:00</dd>" in shown
    assert '<dt>Occurred</dt><dd><span class="none" title="none">—</span></dd>' in empty


def test_boosted_and_history_restore_requests_get_whole_pages(owner_client):
    response = owner_client.get("/console/memories/", HTTP_HX_BOOSTED="true", **HX)
    assert "<html" in response.content.decode()
    response = owner_client.get("/console/memories/", HTTP_HX_HISTORY_RESTORE_REQUEST="true", **HX)
    assert "<html" in response.content.decode()
    assert "HX-Request" in response["Vary"]


def test_memory_list_runs_a_fixed_number_of_queries(
    owner_client, agent, store_memory, django_assert_num_queries
):
    other = make_agent(agent.tenant, "sales-bot")
    for i in range(3):
        store_memory(agent, f"fact {i}", tags=["a", "b"])
    # session, user, membership (+ tenant), agents for the filter, the page of memories, the
    # (bounded) count of all matching rows
    with django_assert_num_queries(6):
        owner_client.get("/console/memories/")
    for i in range(40):
        store_memory(other if i % 2 else agent, f"more fact {i}", tags=["c"])
    with django_assert_num_queries(6):
        page = owner_client.get("/console/memories/?status=any&sort=importance")
    assert page.content.decode().count('name="ids"') == 43


def test_memory_search_runs_a_fixed_number_of_queries(
    owner_client, agent, store_memory, django_assert_num_queries
):
    for i in range(5):
        store_memory(agent, f"email preference {i}", tags=["a"])
    # session, user, membership (+ tenant); the hybrid ranking (no savepoint or SET LOCAL: the
    # HNSW settings are the connection's, `memoryhub.hnsw`) and the exact vector scan the index
    # walk falls back to when it comes back with fewer rows than asked; the ranked rows; agents
    # for the filter.
    with django_assert_num_queries(7):
        owner_client.get("/console/memories/?q=email")
    for i in range(120):
        store_memory(agent, f"email preference more {i}", tags=["b"])
    # More matches than the page shows: the index walk fills it, no fallback; no N+1.
    with django_assert_num_queries(6):
        page = owner_client.get("/console/memories/?q=email&status=any")
    assert page.content.decode().count('name="ids"') == sel.PAGE_SIZE


def test_agents_page_runs_a_fixed_number_of_queries(owner_client, agent, django_assert_num_queries):
    from tests.factories import make_key

    make_key(agent)
    # session, user, membership (+ tenant), agents with their live-memory and key counts, and
    # their live core by subject (the over-limit mark)
    with django_assert_num_queries(5):
        owner_client.get("/console/agents/")
    for i in range(12):
        other = make_agent(agent.tenant, f"bot-{i}")
        make_key(other)
        make_key(other, scopes=["read"])
    with django_assert_num_queries(5):
        page = owner_client.get("/console/agents/")
    assert page.content.decode().count("/console/agents/bot-") == 12


@pytest.mark.parametrize(
    "url",
    [
        "/console/review/",
        "/console/tombstones/",
        "/console/activity/",
        "/console/",
        "/console/agents/",
    ],
)
def test_other_lists_run_a_fixed_number_of_queries(owner_client, agent, store_memory, url):
    def add(n):
        for i in range(n):
            m = store_memory(agent, f"pending fact number {i} {url}", capture_mode="inferred")
            if i % 2:
                Memory.objects.filter(pk=m.pk).update(
                    status=Status.TOMBSTONED, tombstone_reason="r"
                )

    add(2)
    small = _queries(owner_client, url)
    add(12)
    assert _queries(owner_client, url) == small


def test_keyset_pagination_walks_every_memory_once(owner_client, agent, store_memory):
    ids = {store_memory(agent, f"paged {i}").pk for i in range(7)}

    seen, cursor = [], None
    while True:
        page = sel.memory_page(tenant=agent.tenant, filters={}, cursor=cursor, size=3)
        seen += [m.pk for m in page.items]
        cursor = page.next_cursor
        if not cursor:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == len(ids)
    # The table links the next page with a real href.
    response = owner_client.get("/console/memories/")
    assert response.status_code == 200


def test_next_page_links_lead_to_the_next_page(owner_client, agent, store_memory):
    for i in range(sel.PAGE_SIZE + 3):
        store_memory(agent, f"paged fact {i}")
    page = owner_client.get("/console/memories/?status=live").content.decode()
    link = re.search(r'href="([^"]*cursor=[^"]*)"', page).group(1).replace("&amp;", "&")
    # `{% querystring %}` writes the "?" itself: "??cursor=" would read as no cursor at all.
    assert link.startswith("?") and not link.startswith("??") and "status=live" in link
    second = owner_client.get(f"/console/memories/{link}").content.decode()
    assert second.count('name="ids"') == 3


def test_tombstones_page_walks_every_tombstone_once_when_some_lack_a_change_time(
    owner_client, agent, store_memory
):
    from memories.services.operator_actions import memory_tombstone

    ids = set()
    for i in range(8):
        memory = store_memory(agent, f"forgotten {i}")
        memory_tombstone(tenant=agent.tenant, memory_id=memory.pk, actor="operator:t")
        ids.add(memory.pk)
    # As an imported backup can leave them: tombstoned without a status change time.
    Memory.objects.filter(pk__in=sorted(ids)[:5]).update(status_changed_at=None)
    seen, cursor = [], None
    for _ in range(10):
        page = sel.tombstone_page(tenant=agent.tenant, cursor=cursor, size=3)
        seen += [m.pk for m in page.items]
        cursor = page.next_cursor
        if not cursor:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == len(ids)
    body = owner_client.get("/console/tombstones/").content.decode()
    assert all(pk in body for pk in ids)


def test_filters_by_agent_tag_and_status(owner_client, agent, store_memory):
    other = make_agent(agent.tenant, "sales-bot")
    store_memory(agent, "Support billing fact", tags=["billing"])
    store_memory(agent, "Support shipping fact", tags=["shipping"])
    store_memory(other, "Sales billing fact", tags=["billing"])
    body = owner_client.get("/console/memories/?agent=support-bot&tag=billing").content.decode()
    assert "Support billing fact" in body
    assert "Support shipping fact" not in body and "Sales billing fact" not in body
    body = owner_client.get("/console/memories/?status=tombstoned").content.decode()
    assert "billing fact" not in body


def test_text_search_uses_hybrid_ranking(owner_client, agent, store_memory):
    store_memory(agent, "The customer prefers email over phone calls")
    store_memory(agent, "Shipping to Norway takes five days")
    body = owner_client.get("/console/memories/?q=email+preference").content.decode()
    # Semantic neighbours may follow, but the keyword-and-vector match ranks first.
    assert "prefers email" in body
    assert "Norway" not in body or body.index("prefers email") < body.index("Norway")
    assert "ranked by hybrid search" in body


# --- detail: Edit → Save ---------------------------------------------------------------------


class _FormValues(HTMLParser):
    """The values a browser would submit from the page's edit form."""

    def __init__(self):
        super().__init__()
        self.values: dict[str, str] = {}
        self._textarea: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("name") and attrs.get("type") != "checkbox":
            self.values.setdefault(attrs["name"], attrs.get("value") or "")
        elif tag == "textarea":
            self._textarea = attrs["name"]
            self.values[self._textarea] = ""

    def handle_data(self, data):
        if self._textarea:
            self.values[self._textarea] += data

    def handle_endtag(self, tag):
        if tag == "textarea":
            # Browsers drop the one newline that follows <textarea>.
            name = self._textarea
            self.values[name] = self.values[name].removeprefix("\n")
            self._textarea = None


def _edit_form(body: str) -> dict[str, str]:
    form = body[body.index('class="card edit-form"') :]
    parser = _FormValues()
    parser.feed(form[: form.index("</form>")])
    return {k: v for k, v in parser.values.items() if k != "reason"}


def _loaded_form(client, memory) -> dict[str, str]:
    return _edit_form(client.get(f"/console/memories/{memory.pk}/?edit=1").content.decode())


def _save(client, memory, text, version, **extra):
    """Save `text` from a form loaded with `memory` as it was at `version`."""
    from memories.console.forms import CorrectionForm

    data = {
        **CorrectionForm.display_values(memory),
        "text": text,
        "expected_version": version,
        "base": json.dumps(CorrectionForm.base_of(memory)),
    }
    return client.post(f"/console/memories/{memory.pk}/save/", data, **extra)


def test_edit_save_is_a_correction_with_a_revision(reviewer_client, agent, store_memory):
    memory = store_memory(agent, "The office opens at 9")
    form = reviewer_client.get(f"/console/memories/{memory.pk}/?edit=1").content.decode()
    assert 'name="expected_version" value="1"' in form and ">Save</button>" in form
    response = _save(reviewer_client, memory, "The office opens at 8", 1, **HX)
    assert response.status_code == 200
    body = response.content.decode()
    assert "The office opens at 8" in body and "<html" not in body
    # the diff in the history
    assert '<del title="removed">9</del><ins title="added">8</ins>' in body
    memory.refresh_from_db()
    assert (memory.text, memory.version) == ("The office opens at 8", 2)
    revision = MemoryRevision.objects.filter(memory_id=memory.pk).latest("id")
    assert revision.change_type == ChangeType.CORRECT
    assert revision.actor == "operator:reviewer@acme.test"


def test_saving_a_tag_change_leaves_the_text_byte_for_byte(reviewer_client, agent, store_memory):
    text = "  Indented first line\nsecond line with trailing spaces   \n"
    memory = store_memory(agent, text)
    form = _loaded_form(reviewer_client, memory)
    assert form["text"] == text
    # What a browser sends: the textarea's lines end in CRLF.
    form.update(text=text.replace("\n", "\r\n"), tags="billing")
    response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form)
    assert response.status_code == 302
    memory.refresh_from_db()
    assert (memory.text, memory.tags, memory.version) == (text, ["billing"], 2)
    revision = MemoryRevision.objects.filter(memory_id=memory.pk).latest("id")
    assert revision.before["text"] == revision.after["text"] == text
    # Tags differing only in case and spacing are no change; a real text change is stored
    # with LF line ends.
    form = _loaded_form(reviewer_client, memory)
    form.update(tags=" Billing ", text="line one\r\nline two")
    reviewer_client.post(f"/console/memories/{memory.pk}/save/", form)
    memory.refresh_from_db()
    assert (memory.text, memory.tags, memory.version) == ("line one\nline two", ["billing"], 3)
    form = _loaded_form(reviewer_client, memory)
    response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form, follow=True)
    assert "Nothing changed." in response.content.decode()
    memory.refresh_from_db()
    assert memory.version == 3


def test_save_conflict_shows_newer_text_and_keeps_the_edit(reviewer_client, agent, store_memory):
    memory = store_memory(agent, "Original text")
    first = _save(reviewer_client, memory, "Someone else's text", 1)
    assert first.status_code == 302
    response = _save(reviewer_client, memory, "My careful edit", 1, **HX)
    assert response.status_code == 409
    body = response.content.decode()
    assert "data-conflict" in body and "Someone else&#x27;s text" in body
    assert re.search(r"<textarea[^>]*>\s*My careful edit</textarea>", body)
    assert 'name="expected_version" value="2"' in body
    memory.refresh_from_db()
    assert (memory.text, memory.version) == ("Someone else's text", 2)
    # Saving again from the conflict form is a deliberate overwrite against v2.
    form = _edit_form(body)
    assert reviewer_client.post(f"/console/memories/{memory.pk}/save/", form).status_code == 302
    memory.refresh_from_db()
    assert (memory.text, memory.version) == ("My careful edit", 3)


def test_conflict_shows_every_changed_field_and_a_second_save_reverts_none(
    reviewer_client, agent, store_memory
):
    from memories.services.operator_actions import memory_correct

    memory = store_memory(agent, "Renewal is in March", tags=["billing"])
    form = _loaded_form(reviewer_client, memory)  # v1
    memory_correct(
        tenant=agent.tenant,
        memory_id=memory.pk,
        actor="operator:other@acme.test",
        changes={"tags": ["billing", "renewal"], "importance": 0.9, "category": "contracts"},
        expected_version=1,
    )
    form["text"] = "Renewal is in April"
    response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form, **HX)
    assert response.status_code == 409
    body = response.content.decode()
    assert "operator:other@acme.test saved version 2 while you were editing version 1" in body
    changed = re.findall(r'data-conflict-field="(\w+)"', body)
    assert changed == ["tags", "category", "importance"]  # not text: only the operator's
    rearmed = _edit_form(body)
    # The operator's edit is kept; every field they did not touch shows the newer value.
    assert rearmed["text"] == "Renewal is in April"
    assert (rearmed["tags"], rearmed["category"], rearmed["importance"]) == (
        "billing, renewal",
        "contracts",
        "0.9",
    )
    assert reviewer_client.post(f"/console/memories/{memory.pk}/save/", rearmed).status_code == 302
    memory.refresh_from_db()
    assert (memory.text, memory.tags, memory.category, memory.importance, memory.version) == (
        "Renewal is in April",
        ["billing", "renewal"],
        "contracts",
        0.9,
        3,
    )
    revision = MemoryRevision.objects.filter(memory_id=memory.pk).latest("id")
    assert [k for k in revision.after if revision.before[k] != revision.after[k]] == [
        "text",
        "version",
    ]


def test_a_stale_form_submitted_as_is_applies_only_the_operators_edits(
    reviewer_client, agent, store_memory
):
    """Without going through the conflict page: a form loaded at v1 saved against v1 after
    someone else's change is a conflict, never a silent revert of their fields."""
    from memories.services.operator_actions import memory_correct

    memory = store_memory(agent, "Prefers email", tags=["contact"])
    form = _loaded_form(reviewer_client, memory)
    memory_correct(
        tenant=agent.tenant,
        memory_id=memory.pk,
        actor="operator:other@acme.test",
        changes={"tags": ["contact", "vip"]},
        expected_version=1,
    )
    form["confidence"] = "0.4"
    assert reviewer_client.post(f"/console/memories/{memory.pk}/save/", form).status_code == 409
    memory.refresh_from_db()
    assert (memory.tags, memory.confidence, memory.version) == (["contact", "vip"], 1.0, 2)


def test_save_after_a_tombstone_never_overwrites_it(reviewer_client, agent, store_memory):
    from memories.services.operator_actions import memory_tombstone

    memory = store_memory(agent, "Lives in Paris")
    form = _loaded_form(reviewer_client, memory)
    memory_tombstone(
        tenant=agent.tenant, memory_id=memory.pk, actor="operator:other@acme.test", reason="moved"
    )
    form["text"] = "Lives in Lyon"
    response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form, **HX)
    assert response.status_code == 409
    body = response.content.decode()
    assert "data-not-active" in body
    assert "This memory was tombstoned by operator:other@acme.test" in body
    assert "Restore first" in body and ">Restore</button>" in body
    assert re.search(r"<pre[^>]*data-unsaved-text>Lives in Lyon</pre>", body)
    assert ">Save</button>" not in body
    memory.refresh_from_db()
    assert (memory.status, memory.text, memory.version) == (Status.TOMBSTONED, "Lives in Paris", 2)


@pytest.mark.parametrize("edit", [True, False], ids=["edited", "unchanged"])
def test_save_after_a_tombstone_or_purge_shows_the_notice(
    reviewer_client, agent, store_memory, edit
):
    """`memory_correct` alone decides that only an active memory is corrected; the view shows
    its CONFLICT as the not-active notice, whether the form changed anything or not, and for a
    purged memory too (never its edit form)."""
    from memories.services.operator_actions import memory_purge, memory_tombstone

    for gone in ("tombstone", "purge"):
        memory = store_memory(agent, f"Lives in Paris ({gone})")
        form = _loaded_form(reviewer_client, memory)
        if gone == "purge":
            memory_purge(tenant=agent.tenant, memory_id=memory.pk, actor="operator:other")
        else:
            memory_tombstone(tenant=agent.tenant, memory_id=memory.pk, actor="operator:other")
        if edit:
            form["text"] = "Lives in Lyon"
        response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form, **HX)
        assert response.status_code == 409, gone
        body = response.content.decode()
        assert "data-not-active" in body and "This memory was tombstoned by operator:other" in body
        assert ">Save</button>" not in body
        memory.refresh_from_db()
        assert (memory.status, memory.version) == (Status.TOMBSTONED, 2)


def test_a_stale_form_saved_unchanged_shows_what_changed_since(
    reviewer_client, agent, store_memory
):
    from memories.services.operator_actions import memory_correct

    memory = store_memory(agent, "Prefers email")
    form = _loaded_form(reviewer_client, memory)
    memory_correct(
        tenant=agent.tenant,
        memory_id=memory.pk,
        actor="operator:other@acme.test",
        changes={"text": "Prefers phone"},
        expected_version=1,
    )
    response = reviewer_client.post(f"/console/memories/{memory.pk}/save/", form, **HX)
    assert response.status_code == 409
    assert re.findall(r'data-conflict-field="(\w+)"', response.content.decode()) == ["text"]
    memory.refresh_from_db()
    assert (memory.text, memory.version) == ("Prefers phone", 2)


def test_memory_correct_refuses_a_memory_that_is_not_active(agent, store_memory):
    from memories.services.operator_actions import memory_correct, memory_tombstone
    from memoryhub.errors import Conflict

    memory = store_memory(agent, "Lives in Paris")
    memory_tombstone(tenant=agent.tenant, memory_id=memory.pk, actor="operator:x", reason="r")
    with pytest.raises(Conflict) as exc:
        memory_correct(
            tenant=agent.tenant,
            memory_id=memory.pk,
            actor="operator:y",
            changes={"text": "Lives in Lyon"},
            expected_version=2,  # the current version: no CAS excuse
        )
    assert exc.value.details == {"current_version": 2, "status": "tombstoned"}
    assert "tombstoned by operator:x" in exc.value.message
    memory.refresh_from_db()
    assert (memory.text, memory.version) == ("Lives in Paris", 2)


# --- other actions ---------------------------------------------------------------------------


def test_tombstone_then_restore(reviewer_client, agent, store_memory):
    memory = store_memory(agent, "Forget me, then remember me")
    url = f"/console/memories/{memory.pk}/"
    response = reviewer_client.post(url + "tombstone/", {"reason": "outdated"}, **HX)
    assert (
        "outdated" in response.content.decode() and ">Restore</button>" in response.content.decode()
    )
    memory.refresh_from_db()
    assert (memory.status, memory.tombstone_reason) == (Status.TOMBSTONED, "outdated")
    listing = reviewer_client.get("/console/tombstones/").content.decode()
    assert (
        "Forget me" in listing
        and "outdated" in listing
        and "operator:reviewer@acme.test" in listing
    )
    response = reviewer_client.post(url + "restore/")
    assert response.status_code == 302 and response["Location"] == url
    memory.refresh_from_db()
    assert memory.status == Status.ACTIVE


def test_a_refused_action_says_why_and_goes_back(reviewer_client, agent, store_memory):
    """A service refusal (here: restoring next to a live memory with the same key) is flashed;
    a form post lands back on the detail page (or `next`), an HTMX post reloads in place."""
    old = store_memory(agent, "Lives in Paris", key="home")
    reviewer_client.post(f"/console/memories/{old.pk}/tombstone/")
    store_memory(agent, "Lives in Rome", key="home")
    url = f"/console/memories/{old.pk}/"
    response = reviewer_client.post(url + "restore/", follow=True)
    assert response.redirect_chain == [(url, 302)]
    assert "Another live memory holds this key" in response.content.decode()
    response = reviewer_client.post(url + "restore/", {"next": "/console/tombstones/"})
    assert response.status_code == 302 and response["Location"] == "/console/tombstones/"
    response = reviewer_client.post(url + "restore/", **HX)
    assert response.status_code == 200 and response["HX-Refresh"] == "true"
    old.refresh_from_db()
    assert old.status == Status.TOMBSTONED


def test_review_queue_oldest_first_and_approve_removes_row(reviewer_client, agent, store_memory):
    first = store_memory(agent, "Inferred first", capture_mode="inferred")
    second = store_memory(agent, "Inferred second", capture_mode="inferred")
    store_memory(agent, "Explicit, not pending")
    body = reviewer_client.get("/console/review/").content.decode()
    assert body.index("Inferred first") < body.index("Inferred second")
    assert "Explicit, not pending" not in body
    response = reviewer_client.post(
        f"/console/memories/{first.pk}/approve/", {"from": "review"}, **HX
    )
    assert response.status_code == 200 and response.content == b""
    first.refresh_from_db()
    assert first.review_state == ReviewState.APPROVED
    body = reviewer_client.get("/console/review/").content.decode()
    assert "Inferred first" not in body and "Inferred second" in body
    assert second.pk in body


def test_merge_keeps_one_and_tombstones_the_rest(reviewer_client, agent, store_memory):
    keep = store_memory(agent, "Customer prefers email", capture_mode="inferred")
    dup = store_memory(agent, "Customer prefers email")
    body = reviewer_client.get("/console/review/").content.decode()
    assert dup.pk in body  # listed as a near-duplicate
    response = reviewer_client.post(
        f"/console/memories/{keep.pk}/merge/", {"merge": [dup.pk], "from": "review"}
    )
    assert response.status_code == 302
    dup.refresh_from_db()
    assert dup.status == Status.TOMBSTONED and keep.pk in dup.tombstone_reason


def test_merge_from_the_review_queue_approves_the_kept_memory(reviewer_client, agent, store_memory):
    keep = store_memory(agent, "Customer prefers email", capture_mode="inferred")
    dup = store_memory(agent, "Customer prefers email")
    response = reviewer_client.post(
        f"/console/memories/{keep.pk}/merge/", {"merge": [dup.pk], "from": "review"}, **HX
    )
    assert response.status_code == 200 and response.content == b""  # the row leaves
    keep.refresh_from_db()
    assert keep.review_state == ReviewState.APPROVED and keep.version == 2
    assert keep.last_confirmed_at == keep.updated_at
    revision = MemoryRevision.objects.filter(memory_id=keep.pk).latest("id")
    assert (revision.change_type, revision.actor) == (
        ChangeType.APPROVE,
        "operator:reviewer@acme.test",
    )
    # On reload the kept memory is not in the queue any more.
    assert keep.pk not in reviewer_client.get("/console/review/").content.decode()


def test_memory_merge_service_approves_the_kept_memory(agent, store_memory):
    from memories.services.operator_actions import memory_merge

    keep = store_memory(agent, "Lives in Oslo", capture_mode="inferred")
    dup = store_memory(agent, "Lives in Oslo, Norway", capture_mode="inferred")
    before = keep.last_confirmed_at
    kept = memory_merge(
        tenant=agent.tenant, keep_id=keep.pk, merge_ids=[dup.pk], actor="operator:t"
    )
    keep.refresh_from_db()
    dup.refresh_from_db()
    assert kept.review_state == keep.review_state == ReviewState.APPROVED
    assert keep.last_confirmed_at > before
    assert dup.status == Status.TOMBSTONED and dup.tombstone_reason == f"merged into {keep.pk}"
    assert dup.review_state == ReviewState.PENDING  # tombstoned, not approved


def test_bulk_tombstone_and_add_tag(reviewer_client, agent, store_memory):
    a = store_memory(agent, "Bulk one")
    b = store_memory(agent, "Bulk two")
    c = store_memory(agent, "Bulk three")
    response = reviewer_client.post(
        "/console/memories/bulk/", {"action": "tag", "tag": "Reviewed", "ids": [a.pk, b.pk]}
    )
    assert response.status_code == 302
    assert Memory.objects.get(pk=a.pk).tags == ["reviewed"]
    response = reviewer_client.post(
        "/console/memories/bulk/",
        {"action": "tombstone", "reason": "bulk clean", "ids": [a.pk, c.pk]},
    )
    assert response.status_code == 302
    statuses = dict(Memory.objects.values_list("pk", "status"))
    assert statuses == {a.pk: "tombstoned", b.pk: "active", c.pk: "tombstoned"}


def test_purge_by_admin_erases_text(login, admin_user, agent, store_memory):
    client = login(admin_user)
    memory = store_memory(agent, "Erase me entirely")
    response = client.post(f"/console/memories/{memory.pk}/purge/")
    assert response.status_code == 302
    memory.refresh_from_db()
    assert memory.text == "" and memory.purged_at is not None


# --- XSS -------------------------------------------------------------------------------------

# Each hostile text and what the allow-list leaves of it: no script, no handler, no link target.
HOSTILE = {
    "<script>alert(1)</script>": "",
    "<img src=x onerror=alert(2)>": "<p></p>",
    "[click me](javascript:alert(3))": '<p><a rel="noopener noreferrer nofollow">click me</a></p>',
    '<a href="javascript:alert(4)" onclick="alert(5)">x</a>': (
        '<p><a rel="noopener noreferrer nofollow">x</a></p>'
    ),
}


def test_hostile_text_renders_inert_in_detail(owner_client, agent, store_memory):
    for text, inert in HOSTILE.items():
        memory = store_memory(agent, text)
        response = owner_client.get(f"/console/memories/{memory.pk}/")
        assert response.status_code == 200
        body = response.content.decode()
        assert memory.pk in body
        rendered = body.split("data-memory-text>", 1)[1].split("</div>", 1)[0]
        assert rendered == inert, text
        assert "<script" not in rendered and "<img" not in rendered
        assert "javascript:" not in rendered and "onerror" not in rendered.replace(
            "onerror=alert(2)&gt;", ""
        )
        assert "onclick" not in rendered
        assert "<script>alert" not in body  # not in the list, history or anywhere else
        response = owner_client.get("/console/memories/")
        assert response.status_code == 200
        listing = response.content.decode()
        assert memory.pk in listing  # its row is there, its text inert
        assert "<script>alert" not in listing and "<img src=x" not in listing


def test_markdown_still_renders(owner_client, agent, store_memory):
    memory = store_memory(agent, "Prefers **email**. See [docs](https://example.com/docs).")
    body = owner_client.get(f"/console/memories/{memory.pk}/").content.decode()
    assert "<strong>email</strong>" in body
    assert (
        'href="https://example.com/docs"' in body and 'rel="noopener noreferrer nofollow"' in body
    )


# --- agents and keys -------------------------------------------------------------------------


def test_agent_create_policy_and_keys(login, admin_user, agent):
    client = login(admin_user)
    response = client.post("/console/agents/", {"slug": "sales-bot", "name": "Sales"})
    assert response.status_code == 302 and response["Location"] == "/console/agents/sales-bot/"
    response = client.post(
        f"/console/agents/{agent.slug}/",
        {
            "entry_cap": 50,
            "hydration_budget_bytes": 4000,
            "default_category": "daily",
            "dedup_threshold": 0.8,
            "default_ttl": "7d",
            "reads_from": ["sales-bot"],
        },
    )
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.policy()["reads_from"] == ["sales-bot"]
    assert (agent.entry_cap, agent.default_ttl.days) == (50, 7)

    response = client.post(
        f"/console/agents/{agent.slug}/keys/", {"scopes": ["read"], "name": "ci"}, **HX
    )
    body = response.content.decode()
    raw = re.search(r'value="(mh_[A-Za-z0-9]+)"', body).group(1)
    key = ApiKey.objects.get(agent=agent, name="ci")
    assert raw.startswith(key.prefix) and key.key_hash != raw
    assert raw not in client.get(f"/console/agents/{agent.slug}/").content.decode()
    response = client.post(f"/console/keys/{key.pk}/revoke/", **HX)
    assert "revoked" in response.content.decode()
    key.refresh_from_db()
    assert key.revoked_at is not None


def test_jobs_page_lists_runs(owner_client):
    from memories.models import JobRun

    JobRun.objects.create(job="prune_memories", status="ok", counts={"expired": 3})
    body = owner_client.get("/console/jobs/").content.decode()
    assert "prune_memories" in body and "expired" in body and ">Run now</button>" in body


def test_run_now_enqueues_the_job(login, admin_user):
    from memories.models import JobRun

    client = login(admin_user)
    response = client.post("/console/jobs/run/", {"job": "prune_memories"})
    assert response.status_code == 302
    # Test settings run django-q2 synchronously: the run is recorded at once.
    run = JobRun.objects.get(job="prune_memories")
    assert (run.trigger, run.status) == ("console", "ok")
    assert client.post("/console/jobs/run/", {"job": "rm -rf"}).status_code == 404


def test_owner_manages_members(owner_client, tenant):
    from accounts.models import Membership

    page = owner_client.get("/console/members/").content.decode()
    assert "owner@acme.test" in page
    response = owner_client.post(
        "/console/members/",
        {"email": "New@Acme.test", "role": "reviewer", "password": "a-long-password"},
    )
    assert response.status_code == 302
    membership = Membership.objects.get(tenant=tenant, user__username="new@acme.test")
    assert membership.role == "reviewer"
    # A new operator needs a password; an existing one does not.
    response = owner_client.post("/console/members/", {"email": "x@acme.test", "role": "viewer"})
    assert response.status_code == 422
    response = owner_client.post("/console/members/", {"email": "new@acme.test", "role": "admin"})
    assert response.status_code == 302
    membership.refresh_from_db()
    assert membership.role == "admin"


def test_activity_filters_by_actor_and_type(owner_client, agent, store_memory):
    from memories.services.operator_actions import memory_tombstone

    kept = store_memory(agent, "Kept")
    gone = store_memory(agent, "Gone")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:z@acme.test")
    body = owner_client.get("/console/activity/?type=tombstone").content.decode()
    assert gone.pk in body and kept.pk not in body
    body = owner_client.get("/console/activity/?actor=agent:support-bot").content.decode()
    assert gone.pk in body and kept.pk in body and "operator:z@acme.test" not in body


def test_tampered_cursor_restarts_the_list(owner_client, agent, store_memory):
    from memories.cursors import encode_position

    store_memory(agent, "Still listed")
    for cursor in ("garbage", encode_position("not-a-number", "x"), encode_position(None, 1)):
        response = owner_client.get(f"/console/memories/?sort=importance&cursor={cursor}")
        assert response.status_code == 200 and "Still listed" in response.content.decode()


def test_nul_bytes_in_filters_do_not_break_the_list(owner_client, agent, store_memory):
    store_memory(agent, "Plain")
    for query in ("subject=a%00b", "tag=x%00", "q=he%00llo", "kind=%00"):
        assert owner_client.get(f"/console/memories/?{query}").status_code == 200, query
    assert owner_client.get("/console/export/markdown/?subject=%00").status_code == 200


# --- presentation ----------------------------------------------------------------------------


def test_dashboard_links_expiring_and_names_recent_memories(owner_client, agent, store_memory):
    soon = store_memory(agent, "Trial ends tomorrow", ttl="12h")
    store_memory(agent, "Expires next month", ttl="30d")
    store_memory(agent, "A durable fact about the customer's billing address", key="billing")
    body = owner_client.get("/console/").content.decode()
    link = re.search(
        r'<a class="stat" href="([^"]+)"><span class="stat-value">1</span>'
        r"<span class=\"stat-label\">Expiring in 24 h",
        body,
    )
    assert link, "the expiring stat links somewhere"
    listing = owner_client.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert soon.pk in listing and "Expires next month" not in listing
    assert "durable fact" not in listing
    # Recent activity names each memory by the start of its text (not its key), and says when.
    assert ">A durable fact about the customer&#x27;s billing address</a>" in body
    assert ">billing</a>" not in body and ">Trial ends tomorrow</a>" in body
    assert "just now" in body and "0\xa0minutes ago" not in body and "0 minutes" not in body


def test_the_expiry_filter_leaves_out_memories_already_expired(agent, store_memory):
    """Thirteen hours on, a 12 h memory has expired (the sweep has not run: it is still
    `active`) and is not "expiring"; a 30 h one now is, within 24 h."""
    from datetime import timedelta

    from django.utils import timezone

    store_memory(agent, "Trial ends soon", ttl="12h")
    later = store_memory(agent, "Trial ends later", ttl="30h")
    store_memory(agent, "Expires next month", ttl="30d")
    now = timezone.now() + timedelta(hours=13)
    for window in ("24h", "7d"):
        rows = sel.memory_filtered(tenant=agent.tenant, filters={"expires": window}, now=now)
        assert set(rows.values_list("pk", flat=True)) == {later.pk}, window


def test_memories_list_counts_results_and_shows_status_only_when_mixed(
    owner_client, agent, store_memory
):
    from memories.services.operator_actions import memory_tombstone

    for i in range(3):
        store_memory(agent, f"Counted fact {i}")
    gone = store_memory(agent, "Tombstoned fact")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:t")
    body = owner_client.get("/console/memories/").content.decode()
    assert re.search(r"data-result-count>3 memories<", body)
    assert '<span class="status status-active">' not in body  # filtered to Active: said once
    body = owner_client.get("/console/memories/?status=any").content.decode()
    assert re.search(r"data-result-count>4 memories<", body)
    assert body.count('<span class="status status-active">') == 3
    assert body.count('<span class="status status-tombstoned">') == 1


def test_detail_keeps_purge_in_a_danger_zone_and_one_empty_dash(
    login, admin_user, agent, store_memory
):
    memory = store_memory(agent, "No subject, no thread, no tags")
    body = login(admin_user).get(f"/console/memories/{memory.pk}/").content.decode()
    actions = body.split('aria-label="Memory actions"', 1)[1].split("</div>", 1)[0]
    assert ">Purge</button>" not in actions and ">Tombstone</button>" in actions
    zone = body.split('id="danger-zone-title"', 1)[1]
    assert "Danger zone" in zone and ">Purge</button>" in zone
    fields = body.split('<dl class="fields">', 1)[1].split("</dl>", 1)[0]
    dash = '<span class="none" title="none">—</span>'
    for name in ("Tags", "Subject", "Thread", "Mentions"):
        assert re.search(rf"<dt>{name}</dt><dd[^>]*>{re.escape(dash)}</dd>", fields), name


def test_review_queue_counts_and_edit_leads_back_to_the_queue(reviewer_client, agent, store_memory):
    first = store_memory(agent, "Inferred: works at Acem", capture_mode="inferred")
    store_memory(agent, "Inferred: likes tea", capture_mode="inferred")
    queue = reviewer_client.get("/console/review/").content.decode()
    assert re.search(r"data-pending-count>2<", queue)
    assert '<label class="inline-label" for="reason-' in queue  # a visible label
    edit = re.search(rf'href="(/console/memories/{first.pk}/\?edit=1&amp;next=[^"]+)"', queue)
    assert edit and "next=%2Fconsole%2Freview%2F" in edit.group(1)
    page = reviewer_client.get(edit.group(1).replace("&amp;", "&")).content.decode()
    assert '<a href="/console/review/" data-back>← Review queue</a>' in page
    form = _edit_form(page)
    assert form["next"] == "/console/review/"
    form["text"] = "Inferred: works at Acme"
    # HTMX Save: the panel says so and links back to the queue.
    response = reviewer_client.post(f"/console/memories/{first.pk}/save/", form, **HX)
    assert 'href="/console/review/" class="flash-link">← Back to the review queue</a>' in (
        response.content.decode()
    )
    assert response["HX-Push-Url"] == f"/console/memories/{first.pk}/?next=%2Fconsole%2Freview%2F"
    # A plain form Save goes straight back to the queue.
    form = _loaded_form(reviewer_client, Memory.objects.get(pk=first.pk))
    form.update(text="Inferred: works at Acme Corp", next="/console/review/")
    response = reviewer_client.post(f"/console/memories/{first.pk}/save/", form)
    assert response.status_code == 302 and response["Location"] == "/console/review/"
    # Only console pages are followed; anything else falls back to the memories list.
    page = reviewer_client.get(f"/console/memories/{first.pk}/?next=https://evil.test/").content
    assert b'<a href="/console/memories/" data-back>' in page


def test_ago_and_or_dash_filters():
    from datetime import timedelta

    from django.utils import timezone

    from memories.templatetags.console_extras import ago, or_dash

    now = timezone.now()
    assert ago(now) == "just now" and ago(None) == "never"
    assert ago(now - timedelta(minutes=5)) == "5\xa0minutes ago"
    assert or_dash("") == or_dash(None) == or_dash([]) == '<span class="none" title="none">—</span>'
    assert or_dash("<b>x</b>") == "&lt;b&gt;x&lt;/b&gt;"


def test_members_a_new_operator_needs_a_password_an_existing_one_keeps_theirs(
    owner_client, tenant, other_tenant, django_user_model
):
    response = owner_client.post("/console/members/", {"email": "New@Acme.test", "role": "viewer"})
    assert response.status_code == 422
    assert "A new operator needs a password." in response.content.decode()
    assert not django_user_model.objects.filter(username="new@acme.test").exists()

    response = owner_client.post(
        "/console/members/", {"email": "New@Acme.test", "role": "viewer", "password": "pw-1"}
    )
    assert response.status_code == 302
    user = django_user_model.objects.get(username="new@acme.test")
    assert user.check_password("pw-1") and Membership.objects.get(user=user).role == "viewer"

    # Known elsewhere: no password needed, and one given does not replace theirs.
    elsewhere = make_operator(other_tenant, "elsewhere@globex.test", "owner").user
    response = owner_client.post(
        "/console/members/",
        {"email": "elsewhere@globex.test", "role": "reviewer", "password": "not-theirs"},
    )
    assert response.status_code == 302
    elsewhere.refresh_from_db()
    assert not elsewhere.check_password("not-theirs")
    assert Membership.objects.for_tenant(tenant).get(user=elsewhere).role == "reviewer"

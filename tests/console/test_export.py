"""Markdown export (console and REST), JSONL export/import."""

from __future__ import annotations

import io
import json
import re
import tracemalloc
from datetime import timedelta

import markdown
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Agent
from memories import fingerprints
from memories.jsonl import export_tenant, memory_to_record
from memories.markdown_export import export_markdown, fence_for, inline_code
from memories.models import Memory, MemoryRevision, Status
from memories.services.jsonl_import import UNIMPORTABLE_ID, ImportLineError, jsonl_import
from memories.services.operator_actions import memory_restore, memory_tombstone
from tests.factories import asgi_http_scope, make_agent, make_operator
from tests.support.memories import store as store_support

pytestmark = pytest.mark.django_db

ENTRY_RE = re.compile(r"^- id: `(mem_[0-9A-Z]{26})`$", re.M)


def parse_export(document: str) -> dict[str, dict]:
    """Read an export back: {memory id: {"category", "text"}}, following the fences exactly."""
    out: dict[str, dict] = {}
    lines = document.split("\n")
    category, current, i = None, None, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            category = line[3:]
        elif m := re.match(r"^- id: `(mem_[0-9A-Z]{26})`$", line):
            current = m.group(1)
        elif (m := re.match(r"^(`{3,})text$", line)) and current:
            fence, body = m.group(1), []
            i += 1
            while lines[i] != fence:
                body.append(lines[i])
                i += 1
            out[current] = {"category": category, "text": "\n".join(body)}
            current = None
        i += 1
    return out


def _download(response) -> str:
    assert response.status_code == 200
    assert response.streaming
    return b"".join(response.streaming_content).decode()


def test_fences_outgrow_any_backtick_run():
    assert fence_for("plain") == "```"
    assert fence_for("has ``` inside") == "````"
    assert fence_for("a ````` b") == "``````"
    assert inline_code("a`b") == "``a`b``"
    assert inline_code("line\nbreak") == "`line break`"


def test_console_markdown_export_has_every_live_memory_and_no_tombstone(
    owner_client, agent, store_memory
):
    other = make_agent(agent.tenant, "sales-bot")
    keep = [
        store_memory(agent, "Core fact", key="a-key", tags=["x"]),
        store_memory(agent, "Daily note", category="daily"),
        store_memory(agent, "Another core", key="b-key"),
    ]
    gone = store_memory(agent, "Forgotten fact")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:t", reason="no")
    store_memory(other, "Sales fact")
    response = owner_client.get("/console/export/markdown/?agent=support-bot")
    today = timezone.now().strftime("%Y-%m-%d")
    assert response["Content-Disposition"] == f'attachment; filename="acme-support-bot-{today}.md"'
    assert response["Content-Type"].startswith("text/markdown")
    document = _download(response)
    parsed = parse_export(document)
    assert set(parsed) == {m.pk for m in keep}
    assert all(parsed[m.pk]["text"] == m.text for m in keep)
    assert "Forgotten fact" not in document and "Sales fact" not in document
    # grouped by category, then key
    assert document.index("## core") < document.index("## daily")
    assert document.index("`a-key`") < document.index("`b-key`")
    for label in (
        "- tags:",
        "- created:",
        "- updated:",
        "- expires:",
        "- confidence:",
        "- source:",
    ):
        assert label in document


def test_export_selected(owner_client, agent, store_memory):
    a = store_memory(agent, "Pick me")
    store_memory(agent, "Not me")
    document = _download(owner_client.get(f"/console/export/markdown/?ids={a.pk}"))
    assert set(parse_export(document)) == {a.pk}


def test_hostile_and_fenced_text_cannot_break_the_export(owner_client, agent, store_memory):
    texts = [
        "```\n## not a heading\n```",
        "````python\nprint('x')\n````\n- id: `mem_00000000000000000000000000`",
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(2)>",
        "[x](javascript:alert(3))",
        "---\n# Fake title\n~~~\nline",
        "trailing backticks ``",
    ]
    memories = [store_memory(agent, t) for t in texts]
    document = _download(owner_client.get("/console/export/markdown/"))
    parsed = parse_export(document)
    assert {pk: v["text"] for pk, v in parsed.items()} == {m.pk: m.text for m in memories}
    assert len(parsed) == len(texts)  # a fake "- id:" line inside a fence is just text
    html = markdown.markdown(document, extensions=["fenced_code"])
    # The only structure is ours (one title, one category, one heading per entry); hostile
    # markup stays escaped inside code blocks.
    headings = re.findall(r"<h(\d)>(.*?)</h\1>", html)
    assert [h for h in headings if h[0] != "3"] == [("1", "Memories of acme / all"), ("2", "core")]
    assert len([h for h in headings if h[0] == "3"]) == len(texts)
    assert "<script" not in html and "<img" not in html and 'href="javascript' not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def _bulk_insert(tenant, agent, count: int) -> None:
    """`count` live memories in one INSERT … SELECT (fast: no per-row Python objects)."""
    table = Memory._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            INSERT INTO {table} (
                id, tenant_id, agent_id, created_by, key, category, kind, text, tags,
                importance, confidence, capture_mode, mentions, last_confirmed_at, created_at,
                updated_at, last_accessed_at, access_count, version, status, review_state,
                size_bytes, content_hash, embedding_model, tombstone_reason, tombstoned_by)
            SELECT 'mem_' || lpad(i::text, 26, '0'), %s, %s, 'agent:bulk', 'k' || i, 'core',
                'fact', 'bulk memory ' || i, '{{}}', 0.5, 1.0, 'explicit', '[]', now(), now(),
                now(), now(), 0, 1, 'active', 'none', 16, '', '', '', ''
            FROM generate_series(1, %s::int) AS i
            """,
            [tenant.pk, agent.pk, count],
        )


def test_markdown_export_streams_50k_memories_in_bounded_memory(tenant, agent):
    now = timezone.now()
    _bulk_insert(tenant, agent, 50_000)
    stream = export_markdown(
        Memory.objects.for_tenant(tenant).live(),
        title="bulk",
        source_for=lambda m: "own",
        generated_at=now,
        chunk_size=500,
    )
    with CaptureQueriesContext(connection) as ctx:
        header = next(stream)
    assert header.startswith("# bulk") and len(ctx.captured_queries) == 0  # nothing read yet
    # Memory is measured over the first 5,000 entries (tracemalloc makes every allocation
    # slow): a queryset evaluated whole would have loaded all 50,000 rows by the first one.
    tracemalloc.start()
    entries = size = 0
    try:
        for piece in stream:
            entries += piece.startswith("### ")
            size += len(piece)
            if entries == 5_000:
                break
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, peak
    for piece in stream:
        entries += piece.startswith("### ")
        size += len(piece)
    assert entries == 50_000
    assert size > 10_000_000  # the whole document never existed at once


@pytest.mark.django_db(transaction=True)  # the request runs in a2wsgi's worker threads
def test_markdown_export_streams_through_the_asgi_app(owner, agent, store_memory, monkeypatch):
    """The deployed app (`memoryhub.asgi.application`: Django as WSGI in a2wsgi's thread pool)
    sends the export chunk by chunk: the first body message leaves before the generator is
    done, and the document arrives in many `more_body` messages, not one buffered blob."""
    import asyncio

    from django.db import connections
    from django.test import Client

    from memories.console import pages
    from memoryhub.asgi import application

    memories = [store_memory(agent, f"Streamed fact {i}", key=f"k{i:03}") for i in range(40)]
    client = Client()
    client.force_login(owner)
    session = client.cookies["sessionid"].value

    progress = {"exhausted": False, "first_body_after_exhaustion": None}

    def watched(*args, **kwargs):
        yield from pages_export(*args, **kwargs)
        progress["exhausted"] = True

    pages_export = pages.export_markdown
    monkeypatch.setattr(pages, "export_markdown", watched)
    # The worker thread's connection closes when its request ends (it would outlive the test
    # and keep the test database from being dropped).
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", 0)

    scope = asgi_http_scope(
        "GET",
        "/console/export/markdown/",
        [(b"cookie", f"sessionid={session}".encode())],
        query_string=b"agent=support-bot",
    )
    messages = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.body" and not any(
            m["type"] == "http.response.body" for m in messages
        ):
            progress["first_body_after_exhaustion"] = progress["exhausted"]
        messages.append(message)

    asyncio.run(application(scope, receive, send))

    start, *bodies = messages
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/markdown")
    assert b"content-length" not in headers  # streamed, never measured whole first
    assert progress["first_body_after_exhaustion"] is False
    assert progress["exhausted"] is True
    streamed = [m for m in bodies if m.get("more_body")]
    assert len(streamed) > len(memories)  # header, category heading, one per entry, footer
    assert not bodies[-1].get("more_body", False)  # the last message closes the body
    document = b"".join(m.get("body", b"") for m in bodies).decode()
    assert set(parse_export(document)) == {m.pk for m in memories}


def test_rest_export_is_the_agents_visible_memories(api_client, agent, store_memory):
    mine = store_memory(agent, "Mine", key="k1")
    workspace = store_memory(agent, "Shared with the tenant", category="workspace")
    gone = store_memory(agent, "Tombstoned one")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:t")
    store_memory(make_agent(agent.tenant, "other-bot"), "Someone else's")
    response = api_client.get("/api/v1/export.md")
    today = timezone.now().strftime("%Y-%m-%d")
    assert response["Content-Disposition"] == f'attachment; filename="acme-support-bot-{today}.md"'
    document = _download(response)
    parsed = parse_export(document)
    assert set(parsed) == {mine.pk, workspace.pk}
    assert "`workspace`" in document and "`own`" in document
    with_tombstones = parse_export(
        _download(api_client.get("/api/v1/export.md?include_tombstoned=true"))
    )
    assert set(with_tombstones) == {mine.pk, workspace.pk, gone.pk}
    only_core = parse_export(_download(api_client.get("/api/v1/export.md?category=core")))
    assert set(only_core) == {mine.pk}
    for query in ("category=NO%20WAY", "subject_id=a%00b", "include_tombstoned=maybe"):
        bad = api_client.get(f"/api/v1/export.md?{query}")
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"


def test_rest_export_needs_a_key(client):
    response = client.get("/api/v1/export.md")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


# --- JSONL -----------------------------------------------------------------------------------


def _rich_memories(agent, store_memory):
    later = timezone.now() + timedelta(days=3)
    items = [
        store_memory(
            agent,
            "Rich memory",
            key="profile",
            kind="UserProfile",
            data={"plan": "pro", "seats": 3},
            tags=["vip", "billing"],
            subject_id="user-42",
            importance=0.9,
            confidence=0.7,
            capture_mode="inferred",
            source_provider="chat",
            mentions=[{"name": "Dana", "type": "person"}],
            expires_at=later.isoformat(),
        ),
        store_memory(agent, "Conversation bit", category="conversation", thread_id="t-1"),
        store_memory(agent, "Workspace rule", category="workspace"),
    ]
    gone = store_memory(agent, "Tombstoned in backup")
    memory_tombstone(tenant=agent.tenant, memory_id=gone.pk, actor="operator:x", reason="old")
    return [*items, gone]


def test_jsonl_round_trips_every_field_into_an_empty_tenant(
    login, owner_client, agent, other_tenant, store_memory
):
    originals = _rich_memories(agent, store_memory)
    expected = {
        m.pk: memory_to_record(Memory.objects.select_related("agent").get(pk=m.pk))
        for m in originals
    }
    backup = _download(owner_client.get("/console/export/jsonl/?status=any"))
    header, *lines = backup.strip().split("\n")
    assert json.loads(header)["contents"] == "memories"
    assert len(lines) == len(originals)
    # Disaster recovery: the old tenant is gone, its backup goes into a fresh one.
    Memory.objects.filter(tenant=agent.tenant).delete()
    admin = make_operator(other_tenant, "admin@globex.test", "admin").user
    client = login(admin)
    upload = io.BytesIO(backup.encode())
    upload.name = "backup.jsonl"
    response = client.post("/console/export/import/", {"file": upload}, follow=True)
    assert "Imported: 4 created, 0 updated, 0 unchanged." in response.content.decode()
    restored = {
        m.pk: memory_to_record(m)
        for m in Memory.objects.for_tenant(other_tenant).select_related("agent")
    }
    assert restored == expected
    assert Agent.objects.filter(tenant=other_tenant, slug="support-bot").exists()
    revisions = MemoryRevision.objects.filter(tenant=other_tenant).count()
    assert revisions == 4

    # Idempotent by id: the same file again changes nothing and writes no revision.
    upload = io.BytesIO(backup.encode())
    upload.name = "backup.jsonl"
    response = client.post("/console/export/import/", {"file": upload}, follow=True)
    assert "Imported: 0 created, 0 updated, 4 unchanged." in response.content.decode()
    assert MemoryRevision.objects.filter(tenant=other_tenant).count() == revisions


def test_import_updates_by_id(tenant, agent, store_memory):
    memory = store_memory(agent, "Before")
    record = memory_to_record(Memory.objects.select_related("agent").get(pk=memory.pk))
    record.update(text="After", version=memory.version + 1)
    import json

    result = jsonl_import(tenant=tenant, lines=[json.dumps(record)], actor="operator:t")
    assert (result.created, result.updated) == (0, 1)
    assert Memory.objects.get(pk=memory.pk).text == "After"


def _versions(memory_id: str) -> list[int]:
    revisions = MemoryRevision.objects.filter(memory_id=memory_id).order_by("id")
    return list(revisions.values_list("version", flat=True))


def _backup_line(memory_id: str) -> str:
    import json

    return json.dumps(memory_to_record(Memory.objects.select_related("agent").get(pk=memory_id)))


def test_an_older_backup_is_imported_as_the_next_version(tenant, agent, store_memory):
    """The database is at version 3, the backup at 2: importing it restores version 2's content
    as version 4 (never back to 2), and the next change is version 5."""
    memory = store_memory(agent, "First")
    memory_tombstone(tenant=tenant, memory_id=memory.pk, actor="operator:t")
    backup = _backup_line(memory.pk)
    memory_restore(tenant=tenant, memory_id=memory.pk, actor="operator:t")
    assert Memory.objects.get(pk=memory.pk).version == 3

    result = jsonl_import(tenant=tenant, lines=[backup], actor="operator:t")

    assert (result.created, result.updated) == (0, 1)
    restored = Memory.objects.get(pk=memory.pk)
    assert (restored.status, restored.version) == (Status.TOMBSTONED, 4)
    assert _versions(memory.pk) == [1, 2, 3, 4]
    assert MemoryRevision.objects.get(memory_id=memory.pk, version=4).change_type == "import"
    # The same line again is no change, although its version (2) differs from the row's (4).
    result = jsonl_import(tenant=tenant, lines=[backup], actor="operator:t")
    assert (result.updated, result.unchanged) == (0, 1)
    memory_restore(tenant=tenant, memory_id=memory.pk, actor="operator:t")
    assert _versions(memory.pk) == [1, 2, 3, 4, 5]
    assert Memory.objects.get(pk=memory.pk).version == 5


def test_a_memory_retention_deleted_is_reimported_after_its_history(tenant, agent, store_memory):
    from memories.jobs.retention_purge import purge_retention

    memory = store_memory(agent, "Deleted by retention, then restored from a backup")
    memory_tombstone(tenant=tenant, memory_id=memory.pk, actor="operator:t")
    backup = _backup_line(memory.pk)  # version 2
    purge_retention(now=timezone.now() + timedelta(days=31))
    assert not Memory.objects.filter(pk=memory.pk).exists()
    assert _versions(memory.pk) == [1, 2, 3]  # create, tombstone, retention's purge

    result = jsonl_import(tenant=tenant, lines=[backup], actor="operator:t")

    assert result.created == 1
    assert Memory.objects.get(pk=memory.pk).version == 4
    assert _versions(memory.pk) == [1, 2, 3, 4]


def test_a_new_id_keeps_the_files_version(tenant, agent):
    jsonl_import(tenant=tenant, lines=[_record(NEW_IDS[0], agent, version=7)], actor="t")
    assert Memory.objects.get(pk=NEW_IDS[0]).version == 7
    assert _versions(NEW_IDS[0]) == [7]


def test_bad_line_is_reported_and_nothing_is_applied(login, tenant, agent, store_memory):
    import json

    good = memory_to_record(
        Memory.objects.select_related("agent").get(pk=store_memory(agent, "Good").pk)
    )
    Memory.objects.all().delete()
    second = dict(good, id="mem_01ARZ3NDEKTSV4RRFFQ69G5FAV", text="Second")
    lines = [json.dumps(good), json.dumps(second), "{not json", json.dumps(good)]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert exc.value.line == 3
    assert Memory.objects.count() == 0
    # A value out of range is caught while reading the file (line 2), before any write.
    bad = dict(second, importance=7)
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=[json.dumps(good), json.dumps(bad)], actor="x")
    assert exc.value.line == 2 and "importance" in exc.value.message
    assert Memory.objects.count() == 0

    admin = make_operator(tenant, "admin@acme.test", "admin").user
    upload = io.BytesIO(("\n".join(lines)).encode())
    upload.name = "bad.jsonl"
    response = login(admin).post("/console/export/import/", {"file": upload}, follow=True)
    assert "Nothing imported: line 3: not valid JSON" in response.content.decode()
    assert Memory.objects.count() == 0


def test_a_number_too_long_to_read_is_a_bad_line(tenant):
    # Python refuses an integer of over 4300 digits with a plain ValueError, not a JSON error.
    line = '{"id": "mem_01ARZ3NDEKTSV4RRFFQ69G5FAV", "importance": ' + "1" * 5000 + "}"
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=[line], actor="operator:t")
    assert exc.value.line == 1
    assert exc.value.message == "not valid JSON (a number too long)"
    assert Memory.objects.count() == 0


def _record(memory_id: str, agent, /, **fields) -> str:
    import json

    record = {
        "format": "memoryhub.memory/1",
        "id": memory_id,
        "agent": agent.slug,
        "key": None,
        "category": "core",
        "kind": "fact",
        "text": "Imported fact",
        "status": "active",
        "created_by": "agent:support-bot",
        **fields,
    }
    return json.dumps(record)


NEW_IDS = ["mem_01ARZ3NDEKTSV4RRFFQ69G5FA1", "mem_01ARZ3NDEKTSV4RRFFQ69G5FA2"]


def test_a_failure_while_writing_rolls_back_the_earlier_lines(login, tenant, agent, store_memory):
    """Line 2 passes every check of the file alone; only its write fails (the key is held by a
    live memory of the database), after line 1 was written: line 1 must be rolled back."""
    store_memory(agent, "The live one", key="office-hours")
    lines = [
        _record(NEW_IDS[0], agent, text="Written first, then rolled back"),
        _record(NEW_IDS[1], agent, key="office-hours", text="Clashes on write"),
    ]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert exc.value.line == 2
    assert exc.value.message == (
        "key 'office-hours' is already held by a live memory of the same owner and subject"
    )
    assert not Memory.objects.filter(pk__in=NEW_IDS).exists()
    assert not MemoryRevision.objects.filter(memory_id__in=NEW_IDS).exists()

    # Through the console: a numbered line error on the page, never a 500.
    admin = make_operator(tenant, "admin@acme.test", "admin").user
    upload = io.BytesIO("\n".join(lines).encode())
    upload.name = "clash.jsonl"
    response = login(admin).post("/console/export/import/", {"file": upload}, follow=True)
    assert response.status_code == 200
    assert "Nothing imported: line 2: key &#x27;office-hours&#x27; is already held" in (
        response.content.decode()
    )
    assert not Memory.objects.filter(pk__in=NEW_IDS).exists()


def test_a_backup_where_a_key_moved_on_imports_over_the_old_state(tenant, agent):
    """The database holds "Plan A" live under key `plan`; the backup has it tombstoned and a
    live successor listed first. Applied line by line the successor would clash."""
    old = _record(NEW_IDS[1], agent, key="plan", text="Plan A")
    jsonl_import(tenant=tenant, lines=[old], actor="operator:t")
    live = _record(NEW_IDS[0], agent, key="plan", text="Plan B")
    gone = _record(NEW_IDS[1], agent, key="plan", text="Plan A", status="tombstoned")
    result = jsonl_import(tenant=tenant, lines=[live, gone], actor="operator:t")
    assert (result.created, result.updated) == (1, 1)
    statuses = dict(Memory.objects.values_list("text", "status"))
    assert statuses == {"Plan B": "active", "Plan A": "tombstoned"}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tags": ["Has Space", "bad tag!"]}, "Each tag must match"),
        ({"tags": [f"t{i}" for i in range(33)]}, "At most 32 tags"),
        ({"text": "x" * 16_001}, "'text' is longer than 16000 characters"),
        ({"category": "Not A Category"}, "'category' must match"),
        ({"kind": "no spaces allowed"}, "'kind' must be a short name"),
        ({"key": "a\tb"}, "'key' contains control characters"),
        ({"text": "nul \u0000 byte"}, "text: NUL bytes are not allowed"),
        ({"mentions": [{"who": "x"}]}, "Each mention is an object"),
        ({"data": ["not", "an", "object"]}, "'data' must be a JSON object"),
        ({"capture_mode": "guessed"}, "'capture_mode' must be one of"),
        ({"review_reason": "because"}, "'review_reason' must be one of"),
        ({"version": 0}, "version: must be a whole number from 1"),
        ({"created_at": "yesterday"}, "'created_at' must be an ISO 8601 timestamp"),
        ({"embedding": [float("nan")] * 384}, "embedding: must be a list of 384 numbers"),
        ({"category": "conversation"}, "A conversation memory needs a 'thread_id'"),
        ({"category": "conversation", "thread_id": " "}, "needs a 'thread_id'"),
        ({"agent": None}, "A memory without an agent must be in the 'workspace' category"),
        ({"category": "workspace"}, "A workspace memory has no agent ('agent' must be null)"),
    ],
)
def test_import_applies_the_api_field_rules(tenant, agent, fields, message):
    lines = [_record(NEW_IDS[0], agent), _record(NEW_IDS[1], agent, **fields)]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert exc.value.line == 2 and message in exc.value.message, exc.value.message
    assert not Memory.objects.filter(pk__in=NEW_IDS).exists()


def test_a_conversation_memory_keeps_its_thread(login, tenant, agent, store_memory):
    """The API's cross-field rule on the memory as the line leaves it: a line that omits
    `thread_id` keeps the memory's; one that clears it is a numbered line error."""
    import json

    memory = store_memory(agent, "Said in a thread", category="conversation", thread_id="t-1")
    record = json.loads(_backup_line(memory.pk))
    del record["thread_id"]
    kept = dict(record, text="Said in a thread, corrected")
    assert jsonl_import(tenant=tenant, lines=[json.dumps(kept)], actor="t").updated == 1
    assert Memory.objects.get(pk=memory.pk).thread_id == "t-1"

    cleared = dict(record, thread_id=None, text="Cleared")
    lines = [_record(NEW_IDS[0], agent), json.dumps(cleared)]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert (exc.value.line, exc.value.message) == (2, "A conversation memory needs a 'thread_id'")
    admin = make_operator(tenant, "admin@acme.test", "admin").user
    upload = io.BytesIO("\n".join(lines).encode())
    upload.name = "threadless.jsonl"
    page = login(admin).post("/console/export/import/", {"file": upload}, follow=True)
    assert "Nothing imported: line 2: A conversation memory needs a &#x27;thread_id&#x27;" in (
        page.content.decode()
    )
    assert Memory.objects.get(pk=memory.pk).thread_id == "t-1"
    assert not Memory.objects.filter(pk=NEW_IDS[0]).exists()


SECRET = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"text": f"the token is {SECRET}"}, "text"),
        ({"data": {"auth": {"token": SECRET}}}, "data.auth.token"),
        ({"tags": ["ok", SECRET.lower()]}, "tags[1]"),
        ({"key": SECRET}, "key"),
    ],
)
def test_import_rejects_secrets_without_echoing_them(login, tenant, agent, fields, field):
    from memories.secrets_scan import find_secret

    assert find_secret(next(iter(fields.values())), "x") is not None  # the sample is a secret
    lines = [_record(NEW_IDS[0], agent), _record(NEW_IDS[1], agent, **fields)]
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=lines, actor="operator:t")
    assert exc.value.line == 2 and exc.value.message.startswith(f"{field}: a secret-shaped")
    assert SECRET not in str(exc.value) and SECRET.lower() not in str(exc.value)
    assert not Memory.objects.filter(pk__in=NEW_IDS).exists()
    admin = make_operator(tenant, "admin@acme.test", "admin").user
    upload = io.BytesIO("\n".join(lines).encode())
    upload.name = "secret.jsonl"
    body = login(admin).post("/console/export/import/", {"file": upload}, follow=True)
    page = body.content.decode()
    assert "Nothing imported: line 2:" in page and SECRET not in page
    assert SECRET.lower() not in page


def test_import_cannot_take_another_tenants_memory(tenant, other_tenant, agent, store_memory):
    import json

    memory = store_memory(agent, "Acme's")
    record = memory_to_record(Memory.objects.select_related("agent").get(pk=memory.pk))
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=other_tenant, lines=[json.dumps(record)], actor="x")
    assert (exc.value.line, exc.value.message) == (1, UNIMPORTABLE_ID)
    assert Memory.objects.get(pk=memory.pk).tenant_id == tenant.pk
    assert Memory.objects.get(pk=memory.pk).status == Status.ACTIVE


def test_another_tenants_id_is_refused_like_a_malformed_one(
    tenant, other_tenant, agent, store_memory
):
    """An import does not tell one tenant that an id exists in another: the answer for such an
    id is the one for a malformed or missing id, word for word and at the same step (after
    every line was read, so a later bad line is reported first either way)."""
    import json

    from tests.support.secret_corpus import TRUE_POSITIVES

    memory = store_memory(agent, "Acme's", key="plan")
    acme = json.dumps(
        [list(Memory.objects.values()), list(MemoryRevision.objects.values())], default=str
    )
    globex_bot = make_agent(other_tenant, "support-bot")
    foreign, malformed, missing = memory.pk, "mem_not-a-ulid", None
    answers = []
    for memory_id in (foreign, malformed, missing):
        lines = [_record(NEW_IDS[0], globex_bot), _record(memory_id, globex_bot, text="Globex")]
        with pytest.raises(ImportLineError) as exc:
            jsonl_import(tenant=other_tenant, lines=lines, actor="operator:g")
        answers.append((exc.value.line, exc.value.message))
    assert answers == [(2, UNIMPORTABLE_ID)] * 3
    _, secret_text, _ = TRUE_POSITIVES[12]
    later = []
    for memory_id in (foreign, malformed):
        lines = [_record(memory_id, globex_bot), _record(NEW_IDS[0], globex_bot, text=secret_text)]
        with pytest.raises(ImportLineError) as exc:
            jsonl_import(tenant=other_tenant, lines=lines, actor="operator:g")
        later.append((exc.value.line, exc.value.message))
    assert later[0] == later[1] and later[0][0] == 2
    after = json.dumps(
        [list(Memory.objects.values()), list(MemoryRevision.objects.values())], default=str
    )
    assert after == acme  # nothing of either tenant changed
    assert not Memory.objects.filter(tenant=other_tenant).exists()


def test_import_derives_size_and_hash_from_the_content(tenant, agent, store_memory):
    """`size_bytes` and `content_hash` are recomputed as a store computes them: a line cannot
    shrink its size below hydrate's budget nor carry a hash that hides it from dedup."""
    import json

    data = {"plan": "pro", "seats": 3}
    honest = store_memory(agent, "Renewal is in March", data=data)
    lines = [
        _record(NEW_IDS[0], agent, text="Renewal is in March", size_bytes=0, content_hash="0" * 64),
        _record(NEW_IDS[1], agent, text="", data=data, size_bytes=1, content_hash=""),
    ]
    assert jsonl_import(tenant=tenant, lines=lines, actor="operator:t").created == 2
    first, second = (Memory.objects.get(pk=pk) for pk in NEW_IDS)
    assert (first.size_bytes, first.content_hash) == (
        len(b"Renewal is in March"),
        fingerprints.content_hash("Renewal is in March", None),
    )
    assert (second.size_bytes, second.content_hash) == (
        fingerprints.size_bytes("", data),
        fingerprints.content_hash("", data),
    )
    # An existing memory: a line that only lies about the derived fields changes nothing.
    record = json.loads(_backup_line(honest.pk))
    lying = dict(record, size_bytes=0, content_hash="f" * 64)
    result = jsonl_import(tenant=tenant, lines=[json.dumps(lying)], actor="operator:t")
    assert (result.updated, result.unchanged) == (0, 1)
    stored = Memory.objects.get(pk=honest.pk)
    assert (stored.size_bytes, stored.content_hash) == (
        record["size_bytes"],
        record["content_hash"],
    )


def test_a_purged_memory_keeps_its_hash_through_a_round_trip(tenant, agent, store_memory):
    """Purge keeps ids, hashes and timestamps: there is no content to derive them from,
    so the line's values stay."""
    import json

    from memories.services.operator_actions import memory_purge

    memory = store_memory(agent, "Erase me")
    memory_purge(tenant=tenant, memory_id=memory.pk, actor="operator:t")
    record = json.loads(_backup_line(memory.pk))
    assert record["text"] == "" and record["data"] is None and record["content_hash"]
    Memory.objects.filter(pk=memory.pk).delete()
    assert jsonl_import(tenant=tenant, lines=[json.dumps(record)], actor="operator:t").created == 1
    restored = Memory.objects.select_related("agent").get(pk=memory.pk)
    assert (restored.content_hash, restored.size_bytes) == (
        record["content_hash"],
        record["size_bytes"],
    )
    again = jsonl_import(tenant=tenant, lines=[json.dumps(record)], actor="operator:t")
    assert again.unchanged == 1


def test_an_existing_memory_cannot_lose_its_agent(tenant, agent, store_memory):
    """The owner rule on the memory as the line leaves it: a line without `agent` would turn an
    agent's core memory into one every agent sees and the cap sweep never counts."""
    import json

    memory = store_memory(agent, "Mine")
    record = dict(json.loads(_backup_line(memory.pk)), agent=None, text="Now everyone's")
    with pytest.raises(ImportLineError) as exc:
        jsonl_import(tenant=tenant, lines=[json.dumps(record)], actor="operator:t")
    assert exc.value.line == 1 and "must be in the 'workspace' category" in exc.value.message
    assert Memory.objects.values_list("agent_id", "text").get(pk=memory.pk) == (agent.pk, "Mine")
    # Both together are a workspace memory, as the store API makes it.
    workspace = dict(record, category="workspace")
    assert jsonl_import(tenant=tenant, lines=[json.dumps(workspace)], actor="t").updated == 1
    assert Memory.objects.get(pk=memory.pk).agent_id is None


# --- a tenant file ---------------------------------------------------------------------------


def _tenant_file(client) -> bytes:
    response = client.get("/console/export/tenant/")
    assert response.status_code == 200
    return b"".join(response.streaming_content)


@pytest.mark.django_db
def test_the_console_moves_a_tenant_in_the_same_format(login, tenant, other_tenant, agent):
    store_support(agent, "Office opens at 9", key="hours")
    store_support(agent, "Office opens at 8", key="hours")
    memory_tombstone(
        tenant=tenant, memory_id=store_support(agent, "Gone").pk, actor="operator:x", reason="old"
    )
    owner = make_operator(tenant, "owner@acme.test", "owner").user
    body = _tenant_file(login(owner))
    assert body.decode() == "".join(export_tenant(tenant))  # the command's lines, exactly
    before = {
        m.pk: memory_to_record(m) for m in Memory.objects.for_tenant(tenant).select_related("agent")
    }
    history = list(
        MemoryRevision.objects.for_tenant(tenant).values_list(
            "memory_id", "version", "actor", "created_at"
        )
    )
    tenant.delete()  # the old instance is gone; its ids are free again

    admin = make_operator(other_tenant, "admin@globex.test", "admin").user
    client = login(admin)
    upload = io.BytesIO(body)
    upload.name = "tenant.jsonl"
    page = client.post("/console/export/import/", {"file": upload}, follow=True).content.decode()
    assert "Imported the tenant file: 1 agent, 4 kind, 2 memory, 4 revision." in page
    after = {
        m.pk: memory_to_record(m)
        for m in Memory.objects.for_tenant(other_tenant).select_related("agent")
    }
    assert after == before
    assert sorted(
        MemoryRevision.objects.for_tenant(other_tenant).values_list(
            "memory_id", "version", "actor", "created_at"
        )
    ) == sorted(history)

    upload = io.BytesIO(body)
    upload.name = "tenant.jsonl"
    page = client.post("/console/export/import/", {"file": upload}, follow=True).content.decode()
    assert "already holds data" in page
    assert MemoryRevision.objects.for_tenant(other_tenant).count() == len(history)

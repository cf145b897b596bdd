"""Every method of `MemoryHub` and `AsyncMemoryHub` (one test body, both clients) against a
live server, and the list walk over 500 memories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from memoryhub_client import (
    ConflictError,
    ErasureResult,
    ExtractResult,
    ForgetResult,
    HydrateResult,
    IngestResult,
    InvalidInputError,
    Kind,
    Memory,
    NotFoundError,
    SearchResult,
    StoreResult,
    Thread,
)

from memories.embeddings import get_embedder
from memories.models import Memory as MemoryRow
from memories.models import Status


def test_store_get_recall_update_confirm_forget(hub):
    first = hub.store(
        "Prefers answers in French",
        key="pref/language",
        subject_id="u-42",
        tags=["Profile"],
        data={"lang": "fr"},
    )
    assert isinstance(first, StoreResult)
    assert first.created is True and first.message == "Ok" and first.version == 1
    assert isinstance(first.memory, Memory) and first.memory.tags == ["profile"]
    assert first.memory.created_at is not None and first.memory.created_at.tzinfo is not None

    again = hub.store("Prefers answers in German", key="pref/language", subject_id="u-42")
    assert (again.created, again.message, again.version) == (False, "Updated", 2)
    assert again.memory_id == first.memory_id

    got = hub.get(first.memory_id, subject_id="u-42")
    assert (got.id, got.text, got.version, got.subject_id) == (
        first.memory_id,
        "Prefers answers in German",
        2,
        "u-42",
    )
    assert hub.recall("pref/language", subject_id="u-42").id == first.memory_id
    assert hub.recall("pref/language") is None  # without the subject: only subject-less ones
    assert hub.recall("no/such/key", subject_id="u-42") is None

    changed = hub.update(first.memory_id, subject_id="u-42", if_match=2, importance=0.9)
    assert (changed.version, changed.importance) == (3, 0.9)
    cleared = hub.update(first.memory_id, subject_id="u-42", ttl="1h")
    assert cleared.expires_at is not None
    forever = hub.update(first.memory_id, subject_id="u-42", expires_at=None)  # null clears
    assert forever.expires_at is None
    confirmed = hub.confirm(first.memory_id, subject_id="u-42")
    assert confirmed.version == forever.version + 1

    assert hub.keys(subject_id="u-42") == ["pref/language"]
    assert hub.keys(subject_id="u-42", key_prefix="pref/") == ["pref/language"]
    assert hub.keys(subject_id="u-42", key_prefix="pref_") == []

    gone = hub.forget(key="pref/language", subject_id="u-42", reason="moved to Spain")
    assert gone == ForgetResult(deleted=True, memory_id=first.memory_id, raw=gone.raw)
    with pytest.raises(NotFoundError):
        hub.get(first.memory_id, subject_id="u-42")
    assert hub.forget(first.memory_id, subject_id="u-42").deleted is False


def test_search_hydrate_and_export(hub):
    hub.store("The customer runs PostgreSQL 18 in Frankfurt", key="infra.db", category="core")
    hub.store("Deploys happen on Tuesdays", category="daily", tags=["ops"])
    result = hub.search("PostgreSQL Frankfurt", mode="keyword", limit=5)
    assert isinstance(result, SearchResult) and result.searched_at is not None
    assert [h.key for h in result][:1] == ["infra.db"]
    top = result.memories[0]
    assert top.text == "The customer runs PostgreSQL 18 in Frankfurt"
    assert 0 < top.relevance <= 1 and top.is_latest and top.source == "own"
    assert len(hub.search("PostgreSQL", key_prefix="other.")) == 0

    hydrated = hub.hydrate(format="markdown", explain=True)
    assert isinstance(hydrated, HydrateResult)
    assert [(e.reason, e.text) for e in hydrated.entries] == [
        ("core", "The customer runs PostgreSQL 18 in Frankfurt"),
        ("recent", "Deploys happen on Tuesdays"),
    ]
    assert hydrated.bytes_used == sum(e.size_bytes for e in hydrated.entries)
    assert hydrated.omitted == []
    assert "The customer runs PostgreSQL 18 in Frankfurt" in hydrated.markdown
    assert "Deploys happen on Tuesdays" in hydrated.markdown
    assert hub.hydrate().markdown is None  # only when asked for

    exported = hub.export_markdown(category="core")
    assert exported.startswith("#") and "infra.db" in exported
    assert "Deploys happen on Tuesdays" not in exported


def test_conversations_and_erasure(hub):
    messages = [
        {"role": "user", "content": "I moved to Lisbon", "created_at": "2025-01-01T10:00:00Z"},
        {"role": "assistant", "content": "Noted!", "created_at": "2025-01-01T10:00:05Z"},
    ]
    added = hub.add_messages("run/1", messages, subject_id="u-7", extract="off")
    assert isinstance(added, IngestResult)
    assert (added.thread_id, added.accepted, added.duplicates) == ("run/1", 2, 0)
    assert hub.add_messages("run/1", messages, subject_id="u-7").duplicates == 2

    thread = hub.get_thread("run/1", subject_id="u-7")
    assert isinstance(thread, Thread) and thread.message_count == 2
    assert thread.last_message_at is not None and thread.ended_at is None
    walked = list(hub.messages("run/1", subject_id="u-7", limit=1))
    assert [(m.seq, m.role, m.content) for m in walked] == [
        (1, "user", "I moved to Lisbon"),
        (2, "assistant", "Noted!"),
    ]
    extracted = hub.extract("run/1", subject_id="u-7")
    assert isinstance(extracted, ExtractResult) and extracted.thread_id == "run/1"
    assert extracted.extraction["state"] == "disabled"  # no LLM configured in the suite

    hub.store("Scratch for this run", category="conversation", thread_id="run/1", subject_id="u-7")
    assert hub.end_thread("run/1", subject_id="u-7") == 1

    hub.store("Lives in Lisbon", subject_id="u-7")
    erased = hub.erase_subject("u-7", purge=True)
    assert isinstance(erased, ErasureResult)
    assert (erased.subject_id, erased.purged, erased.threads, erased.messages) == (
        "u-7",
        True,
        1,
        2,
    )
    assert erased.memories >= 1
    assert list(hub.list(subject_id="u-7")) == []


def test_whoami(hub, live):
    me = hub.whoami()
    assert (me["tenant"], me["agent"], me["scopes"]) == (
        "acme",
        "support-bot",
        ["admin", "read", "write"],
    )


def test_list_walks_a_cursor_over_500_memories_exactly_once(hub, live):
    now = datetime.now(UTC)
    vector = get_embedder().embed(["bulk"])[0]
    # Pairs share an `updated_at`, so the walk's tie-break on id is exercised too.
    rows = MemoryRow.objects.bulk_create(
        MemoryRow(
            tenant=live.agent.tenant,
            agent=live.agent,
            created_by="agent:support-bot",
            key=f"bulk/{i:03d}",
            text=f"bulk memory {i:03d}",
            tags=["bulk"] if i % 2 else [],
            size_bytes=15,
            embedding=vector,
            created_at=now - timedelta(hours=1),
            updated_at=now - timedelta(seconds=i // 2),
        )
        for i in range(500)
    )
    walked = list(hub.list(limit=200))
    assert len(walked) == 500
    assert sorted(m.id for m in walked) == sorted(r.id for r in rows)
    updated = [m.updated_at for m in walked]
    assert updated == sorted(updated, reverse=True)
    tagged = list(hub.list(tag="bulk", key_prefix="bulk/4", limit=7))
    assert sorted(m.key for m in tagged) == [f"bulk/{i}" for i in range(401, 500, 2)]
    assert MemoryRow.objects.filter(status=Status.ACTIVE).count() == 500


def test_kinds_put_kind_delete_kind_and_a_replaced_profile(hub):
    """The kind registry's methods, a schema refused with its path, a single kind's
    store answering `replaced`, a user-scoped memory and hydrate's archival list."""
    names = [kind.name for kind in hub.kinds()]
    assert names == ["AgentInstructions", "InteractionLog", "UserProfile", "fact"]
    invoice = hub.put_kind(
        "Invoice",
        cardinality="multiple",
        memory_type="episodic",
        description="An invoice the customer received.",
        schema={"type": "object", "properties": {"amount": {"type": "number"}}},
    )
    assert isinstance(invoice, Kind) and invoice.tool == "create_invoice"
    assert invoice.created_at is not None
    with pytest.raises(InvalidInputError) as refused:
        hub.store("Invoice 7", kind="Invoice", data={"amount": "ten"})
    assert refused.value.details["errors"][0]["path"] == "/amount"
    stored = hub.store("Invoice 7", kind="Invoice", data={"amount": 10})
    with pytest.raises(ConflictError) as in_use:
        hub.delete_kind("Invoice")
    assert in_use.value.details == {"count": 1}
    hub.forget(memory_id=stored.memory_id)
    assert hub.delete_kind("Invoice") is True
    assert "Invoice" not in [kind.name for kind in hub.kinds()]

    first = hub.store(None, kind="UserProfile", subject_id="u-9", data={"name": "Ann"})
    second = hub.store(
        None, kind="UserProfile", subject_id="u-9", scope="user", data={"name": "Ann"}
    )
    third = hub.store(None, kind="UserProfile", subject_id="u-9", data={"name": "Anna"})
    assert (first.action, second.action, third.action) == ("created", "created", "replaced")
    assert third.memory_id == first.memory_id and third.version == 2
    assert second.memory.scope == "user" and second.memory.agent is None

    hub.store("Visited the Lisbon office in 2021.", category="archival")
    hydrated = hub.hydrate(archival_mode="auto", query="Lisbon office", budget_bytes=1)
    assert hydrated.entries == [] and len(hydrated.archival) == 1
    assert hydrated.archival[0].score > 0 and hydrated.archival[0].category == "archival"


def test_a_list_page_carries_the_walks_horizon_for_the_next_sync(hub):
    hub.store("Alice syncs from the horizon.")
    page = hub.list_page(limit=10)
    assert page.as_of is not None
    later = hub.store("Stored after the page was read.")
    synced = hub.list_page(updated_after=page.as_of)
    assert [m.id for m in synced.items] == [later.memory_id]

"""`compiled.insert_instance`: the row the ORM's `save(force_insert=True)` writes, in one INSERT
written once per model that reads back nothing but an auto primary key; and `compiled.Instances`:
the instances the ORM makes of a compiled statement's rows."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from accounts.principal import Principal
from memories.compiled import CompiledQuery, Instances, Slot, insert_instance
from memories.embeddings import EMBEDDING_DIM
from memories.models import Memory, MemoryRevision
from memories.services.store import memory_store

WHEN = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)


def _memory(tenant, agent, memory_id: str) -> Memory:
    """Every kind of column set: arrays, JSON, a vector, times, nulls."""
    return Memory(
        id=memory_id,
        tenant=tenant,
        agent=agent,
        created_by="agent:a",
        key=None,  # a key is unique per owner, and held by the tsvector
        category="preference",
        kind="fact",
        kind_single=False,
        text="Ann's greyhound is called Pixel; 50% of walks are at 7",
        data={"name": "Pixel", "n": [1, 2.5, None]},
        tags=["dogs", "ann"],
        subject_id="ann",
        thread_id=None,  # in one thread the triggers would link the two rows
        importance=0.75,
        confidence=0.5,
        capture_mode="inferred",
        source_provider="slack",
        mentions=[{"name": "Ann"}],
        occurred_at=WHEN,
        expires_at=WHEN.replace(year=2027),
        requested_expires_at=None,
        last_confirmed_at=WHEN,
        created_at=WHEN,
        updated_at=WHEN,
        last_accessed_at=WHEN,
        review_state="pending",
        review_reason="inferred",
        size_bytes=55,
        content_hash="c" * 64,
        embedding=[0.25] * EMBEDDING_DIM,
        embedding_model="hashing-v1",
    )


def _row(model, pk) -> dict:
    row = model.objects.filter(pk=pk).values().get()
    row.pop("id")
    return row


@pytest.mark.django_db
def test_a_memory_row_is_the_one_the_orm_writes(tenant, agent):
    by_orm = _memory(tenant, agent, "mem_0RM")
    by_orm.save(force_insert=True)
    ours = _memory(tenant, agent, "mem_0URS")
    insert_instance(ours)
    assert not ours._state.adding and ours._state.db == "default"
    assert _row(Memory, "mem_0URS") == _row(Memory, "mem_0RM")
    # The generated full-text column is PostgreSQL's, the same for both.
    assert "pixel" in _row(Memory, "mem_0URS")["search_vector"]


@pytest.mark.django_db
def test_a_revision_gets_its_auto_id_back(tenant, agent):
    memory = _memory(tenant, agent, "mem_REV")
    insert_instance(memory)
    revisions = []
    for version in (1, 2):
        revision = MemoryRevision(
            tenant_id=tenant.pk,
            memory_id=memory.pk,
            version=version,
            actor="agent:a",
            change_type="create",
            after={"text": "x", "version": version},
            created_at=WHEN,
        )
        insert_instance(revision)
        revisions.append(revision)
    first, second = revisions
    assert first.pk is not None and second.pk > first.pk
    assert MemoryRevision.objects.get(pk=second.pk).after == {"text": "x", "version": 2}


@pytest.mark.django_db
def test_an_expression_value_goes_through_the_orm(tenant, agent):
    memory = _memory(tenant, agent, "mem_EXPR")
    insert_instance(memory)
    revision = MemoryRevision(
        tenant_id=tenant.pk,
        memory_id=memory.pk,
        version=1,
        actor="agent:a",
        change_type="create",
        created_at=Now(),
    )
    insert_instance(revision)
    stored = MemoryRevision.objects.get(pk=revision.pk)
    assert stored.created_at.year >= 2026


@pytest.mark.django_db
def test_a_store_reads_back_nothing_it_already_holds(tenant, agent):
    principal = Principal(tenant=tenant, agent=agent)
    with CaptureQueriesContext(connection) as queries:
        result = memory_store(
            principal=principal, data={"text": "The office closes at six on Fridays"}
        )
    [statement] = [q["sql"] for q in queries.captured_queries if "INSERT INTO" in q["sql"]]
    # One statement: the memory, its events, its vector, then its revision, whose id alone is
    # read back.
    memory_part, rest = statement.split("), along1 AS (", 1)
    assert memory_part.startswith('WITH along0 AS (INSERT INTO "memories_memory"')
    assert "RETURNING" not in memory_part  # not the generated tsvector
    assert rest.startswith("INSERT INTO memories_event")
    _events, rest = rest.split("), along2 AS (", 1)
    assert rest.startswith("INSERT INTO memories_memoryvector")
    assert result.memory is not None and result.memory.embedding is not None
    assert ') INSERT INTO "memories_memoryrevision"' in rest
    assert rest.endswith('RETURNING "memories_memoryrevision"."id"')


@pytest.mark.django_db
@pytest.mark.parametrize("only", [None, ("id", "text", "tags", "data", "updated_at", "agent_id")])
def test_compiled_rows_are_the_instances_the_orm_makes(tenant, agent, only):
    """`CompiledQuery.fetch` (search's hits, reads by key) makes the instances iterating its
    queryset makes: the same values, the same deferred fields, loaded from the database."""
    memory = _memory(tenant, agent, "mem_ROWS")
    insert_instance(memory)
    slots = Slot()
    rows = Memory.objects.for_tenant(slots.int("tenant")).filter(pk=slots.text("id"))
    if only:
        rows = rows.only(*only)
    [ours] = CompiledQuery(rows, slots).fetch(tenant=tenant.pk, id="mem_ROWS")
    [theirs] = Memory.objects.for_tenant(tenant).filter(pk="mem_ROWS").only(*(only or ["id"]))
    if not only:
        theirs = Memory.objects.get(pk="mem_ROWS")
    assert ours.get_deferred_fields() == theirs.get_deferred_fields()
    loaded = [f.attname for f in Memory._meta.concrete_fields if f.attname in ours.__dict__]
    assert loaded and [getattr(ours, n) for n in loaded] == [getattr(theirs, n) for n in loaded]
    assert not ours._state.adding and ours._state.db == "default"


def test_instances_refuse_names_out_of_the_models_order():
    with pytest.raises(ValueError, match="out of order"):
        Instances(Memory, ["text", "id"])

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from memories.models import Memory, MemoryRevision
from tests.factories import make_agent


def test_makemigrations_check_finds_nothing(db):
    # Raises SystemExit(1) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def test_extensions_are_installed(db):
    with connection.cursor() as cursor:
        cursor.execute("SELECT extname FROM pg_extension")
        names = {row[0] for row in cursor.fetchall()}
    assert {"vector", "pg_trgm", "btree_gin"} <= names


def _memory(tenant, agent, key, subject=None, status="active", category="core"):
    return Memory.objects.create(
        tenant=tenant,
        agent=agent,
        key=key,
        subject_id=subject,
        status=status,
        category=category,
        text=f"text for {key}",
        created_by="test",
    )


@pytest.mark.django_db
def test_one_live_memory_per_owner_subject_key(tenant, agent):
    _memory(tenant, agent, "k1", subject="u1")
    with pytest.raises(IntegrityError), transaction.atomic():
        _memory(tenant, agent, "k1", subject="u1")


@pytest.mark.django_db
def test_null_subject_and_null_owner_compare_equal(tenant, agent):
    _memory(tenant, agent, "k1")
    with pytest.raises(IntegrityError), transaction.atomic():
        _memory(tenant, agent, "k1")
    _memory(tenant, None, "shared", category="workspace")
    with pytest.raises(IntegrityError), transaction.atomic():
        _memory(tenant, None, "shared", category="workspace")


@pytest.mark.django_db
def test_constraint_spares_dead_rows_other_owners_and_subjects(tenant, other_tenant, agent):
    _memory(tenant, agent, "k1", status="tombstoned")
    _memory(tenant, agent, "k1", status="evicted")
    _memory(tenant, agent, "k1")  # the live one
    _memory(tenant, agent, "k1", subject="u1")
    _memory(tenant, make_agent(tenant, "other-bot"), "k1")
    _memory(other_tenant, make_agent(other_tenant, "support-bot"), "k1")
    _memory(tenant, agent, None)
    _memory(tenant, agent, None)  # keyless memories never collide
    assert Memory.objects.filter(key="k1").count() == 6


@pytest.mark.django_db
def test_vector_fields_are_every_vector_column_of_a_memory():
    """Reads defer `VECTOR_FIELDS`: a vector column added to Memory belongs in it (the
    embedding is not one: it has a table of its own)."""
    from django.contrib.postgres.search import SearchVectorField
    from pgvector.django import VectorField

    from memories.models import VECTOR_FIELDS

    vectors = {
        f.name
        for f in Memory._meta.concrete_fields
        if isinstance(getattr(f, "output_field", f), VectorField | SearchVectorField)
    }
    assert set(VECTOR_FIELDS) == vectors == {"search_vector"}


def test_search_vector_is_generated_from_key_and_text(tenant, agent):
    memory = Memory.objects.create(
        tenant=tenant,
        agent=agent,
        key="favourite-colour",
        text="Colby likes running",
        created_by="test",
    )
    found = Memory.objects.filter(search_vector="running").values_list("id", flat=True)
    assert list(found) == [memory.id]
    assert Memory.objects.filter(search_vector="colour").exists()


def _revisions(tenant, memory_id, versions):
    for version in versions:
        MemoryRevision.objects.create(
            tenant=tenant, memory_id=memory_id, version=version, actor="t", change_type="update",
            before={"version": version - 1}, after={"version": version},
        )  # fmt: skip


@pytest.mark.django_db
def test_one_revision_per_version_of_a_memory(tenant, other_tenant, agent):
    memory = _memory(tenant, agent, "k1")
    _revisions(tenant, memory.pk, [1, 2])
    _revisions(other_tenant, memory.pk, [1])  # ids are global; histories are per tenant
    with pytest.raises(IntegrityError), transaction.atomic():
        _revisions(tenant, memory.pk, [2])


@pytest.mark.django_db
def test_repeated_statements_are_prepared_on_the_server(api_client, agent):
    """Server-side binding (MEMORYHUB_DB_PREPARE): a statement the connection runs again and
    again (here the API-key lookup of each request) is parsed and planned once, as a prepared
    statement, instead of being planned anew each time."""
    for _ in range(6):
        assert api_client.get("/api/v1/memories").status_code == 200
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    assert any("key_hash" in statement for statement in prepared), prepared

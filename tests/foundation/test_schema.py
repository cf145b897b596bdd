from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction

from memories.models import Memory
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

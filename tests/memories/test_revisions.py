"""One revision row shape: `revision_build` (services) and `insert_revisions_sql` (jobs)."""

from __future__ import annotations

import pytest

from memories.models import Memory, MemoryRevision
from memories.revisions import REVISION_COLUMNS, insert_revisions_sql, revision_build


def test_revision_columns_are_the_rows_revision_build_makes():
    fields = {f.attname for f in MemoryRevision._meta.concrete_fields if not f.primary_key}
    assert set(REVISION_COLUMNS) == fields
    built = revision_build(
        memory=Memory(id="mem_x", tenant_id=1, version=2), actor="agent:a", change_type="update"
    )
    assert (built.tenant_id, built.memory_id, built.version) == (1, "mem_x", 2)


def test_a_revision_written_in_sql_names_every_column_once():
    sql = insert_revisions_sql(rows="changed c", **dict.fromkeys(REVISION_COLUMNS, "NULL"))
    assert f"memories_memoryrevision ({', '.join(REVISION_COLUMNS)}) SELECT" in sql
    partial = dict.fromkeys([c for c in REVISION_COLUMNS if c != "reason"], "NULL")
    with pytest.raises(ValueError, match="a revision needs exactly the columns"):
        insert_revisions_sql(rows="changed c", **partial)
    with pytest.raises(ValueError, match="a revision needs exactly the columns"):
        insert_revisions_sql(rows="changed c", **partial, reason="''", extra="1")

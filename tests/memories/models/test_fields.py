"""`PUBLIC_FIELDS` is the one list of a memory's public fields: every other list derives from it."""

from __future__ import annotations

from memories.jsonl import memory_to_record
from memories.models import PUBLIC_FIELDS, SEQUENCE_FIELDS, VECTOR_FIELDS, Memory
from memories.retrieval.search import RESPONSE_FIELDS
from memories.revisions import SNAPSHOT_FIELDS
from memories.serialization import memory_json


def test_public_fields_are_memory_fields_but_source_and_never_a_vector():
    columns = {f.name for f in Memory._meta.concrete_fields}
    assert set(PUBLIC_FIELDS) - columns == {"source"}
    assert not set(PUBLIC_FIELDS) & set(VECTOR_FIELDS)


def test_the_memory_object_has_exactly_the_public_fields_in_order():
    assert tuple(memory_json(Memory(), agent=None)) == PUBLIC_FIELDS


def test_search_reads_the_public_columns_and_snapshots_record_a_subset():
    assert set(RESPONSE_FIELDS) == set(PUBLIC_FIELDS) - {"agent", "source"} | {"agent_id"}
    assert set(SNAPSHOT_FIELDS) < set(PUBLIC_FIELDS)


def test_a_backup_line_holds_every_column_but_the_tenant_and_the_derived_ones():
    """A column added to Memory is backed up: public ones by `PUBLIC_FIELDS`, others by name in
    `memories.jsonl`; the tsvector and the sequence links are derived by the database, and an
    import derives again what the importing tenant's registry and policies decide: whether the
    kind is single, and the effective expiry from the requested one the line carries."""
    columns = {f.name for f in Memory._meta.concrete_fields} - {
        "tenant",
        "search_vector",
        *SEQUENCE_FIELDS,
        "kind_single",
    }
    # The embedding is a line's too, from the memory's row in the vectors' table.
    assert set(memory_to_record(Memory())) == columns | {"type", "embedding"}

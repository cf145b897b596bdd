"""The migrations: one baseline per app that a database migrated before it counts as applied,
and index builds on the large tables that never lock them (docs/operations.md#upgrading)."""

from __future__ import annotations

import io
import re

import pytest
from django.contrib.postgres.operations import AddIndexConcurrently
from django.core.management import call_command
from django.db import connection, migrations, models
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from memoryhub.schema import unapplied_migrations

BASELINES = [("accounts", "0001_baseline"), ("memories", "0001_baseline")]

# The migrations a database had applied before the baselines replaced them (frozen: these are
# the names such a database's django_migrations lists).
PRE_BASELINE = {
    "accounts": """0001_initial 0002_agent_extraction_policy 0010_agent_extraction_max_operations
        0011_agent_block_limits 0012_agent_formation_context 0013_retention_policies
        0014_tenant_user_cap 0015_tenant_kinds_version 0016_slugs_and_categories_matched_whole""",
    "memories": """0001_extensions 0002_memory_models 0003_job_schedules 0004_owner_counts
        0005_memory_live_size_idx 0006_drop_redundant_tenant_indexes 0007_jobrun_tenant_scope
        0008_hydrate_order_indexes 0009_tombstone_page_index 0010_revision_versions_renumber
        0011_revision_version_unique 0012_memory_evidence 0013_threads
        0014_extraction_schedule 0015_idempotency_key_digest_rename
        0016_idempotency_key_digests 0017_idempotency_key_digest_length
        0018_memory_occurred_at 0019_memory_owner_statistics 0020_memory_hot_access_bumps
        0021_memory_fts_per_owner 0022_memory_fts_no_pending_list
        0030_extractionrun_offered_ids 0031_extractionrun_applied_ops
        0060_memory_review_reason 0061_memory_review_reason_backfill 0062_dailyreads
        0070_events 0071_event_position_sequence 0072_webhook_schedule 0080_memory_scope
        0081_owner_counts_per_subject 0082_kind_registry 0083_builtin_kinds
        0084_memory_kind_guard 0085_memory_kind_single 0086_single_kinds_flagged
        0087_memory_requested_expiry 0088_effective_expiry 0089_event_scope
        0090_conversation_needs_thread""",
}

# Tables that grow with use: an index built on them in a transaction locks out their writes for
# as long as the build takes.
LARGE_MODELS = {"memory", "memoryrevision", "event", "memoryvector"}
LARGE_TABLES = {
    "memories_memory",
    "memories_memoryrevision",
    "memories_event",
    "memories_memoryvector",
}
PLAIN_INDEX_SQL = re.compile(r"\bCREATE\s+(?:UNIQUE\s+)?INDEX\s+(?!CONCURRENTLY\b)", re.I)


def test_the_baselines_replace_every_migration_written_before_them():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    for app, name in BASELINES:
        replaced = {
            replaced_name for _, replaced_name in loader.disk_migrations[app, name].replaces
        }
        assert replaced == set(PRE_BASELINE[app].split()), app


@pytest.mark.django_db
def test_a_database_migrated_before_the_baselines_is_up_to_date():
    """Its django_migrations lists the old names, not the baselines: nothing is left to apply,
    and `migrate` only records the baselines as applied."""
    recorder = MigrationRecorder(connection)
    for app, name in BASELINES:
        recorder.record_unapplied(app, name)
        for old in PRE_BASELINE[app].split():
            recorder.record_unapplied(app, old)  # `migrate` recorded them with the baseline
            recorder.record_applied(app, old)
    assert not {key for key in recorder.applied_migrations() if key in BASELINES}

    assert unapplied_migrations() == []
    out = io.StringIO()
    call_command("migrate", interactive=False, stdout=out)
    assert "No migrations to apply." in out.getvalue()
    assert set(BASELINES) <= set(recorder.applied_migrations())
    assert unapplied_migrations() == []


@pytest.mark.django_db
def test_a_database_missing_one_old_migration_is_not_taken_for_up_to_date():
    """The other side: the baseline counts as applied only when every migration it replaces is.
    Django alone would find nothing to apply (the missing one is gone from the code)."""
    recorder = MigrationRecorder(connection)
    recorder.record_unapplied("accounts", "0001_baseline")
    recorder.record_unapplied("accounts", "0016_slugs_and_categories_matched_whole")

    assert unapplied_migrations() == [
        "accounts.0001_baseline (applied in part, missing 0016_slugs_and_categories_matched_whole:"
        " migrate first with the version that has them)"
    ]


def non_concurrent_index_builds(migration: migrations.Migration) -> list[str]:
    """The operations of `migration` that build an index on a large table inside a transaction."""
    found = []

    def visit(operation) -> None:
        what = f"{migration.app_label}.{migration.name}: {operation.describe()}"
        if isinstance(operation, migrations.SeparateDatabaseAndState):
            for inner in operation.database_operations:
                visit(inner)
        elif isinstance(operation, AddIndexConcurrently):
            pass
        elif isinstance(operation, migrations.AddIndex | migrations.AddConstraint):
            constraint = getattr(operation, "constraint", None)
            builds_index = constraint is None or isinstance(constraint, models.UniqueConstraint)
            if builds_index and operation.model_name_lower in LARGE_MODELS:
                found.append(what)
        elif isinstance(operation, migrations.AddField):
            field = operation.field
            indexed = field.db_index or field.unique or field.primary_key
            if indexed and operation.model_name_lower in LARGE_MODELS:
                found.append(what)
        elif isinstance(operation, migrations.RunSQL):
            statements = (
                operation.sql if isinstance(operation.sql, list | tuple) else [operation.sql]
            )
            for statement in statements:
                text = statement[0] if isinstance(statement, list | tuple) else statement
                if PLAIN_INDEX_SQL.search(text) and any(t in text for t in LARGE_TABLES):
                    found.append(what)

    for operation in migration.operations:
        visit(operation)
    return found


def test_migrations_after_the_baselines_build_indexes_on_large_tables_concurrently():
    loader = MigrationLoader(None, ignore_no_migrations=True)
    later = [
        migration
        for (app, name), migration in sorted(loader.disk_migrations.items())
        if app in {"accounts", "memories"} and (app, name) not in BASELINES
    ]
    found = [line for migration in later for line in non_concurrent_index_builds(migration)]
    assert not found, (
        "build these with AddIndexConcurrently (or CREATE INDEX CONCURRENTLY) in a migration "
        "with atomic = False:\n" + "\n".join(found)
    )


def _migration(*operations) -> migrations.Migration:
    migration = migrations.Migration("0002_example", "memories")
    migration.operations = list(operations)
    return migration


def test_the_index_guard_catches_a_plain_build_and_leaves_a_concurrent_one_alone():
    index = models.Index(fields=["tenant", "kind"], name="memory_example_idx")
    unique = models.UniqueConstraint(fields=["tenant", "key"], name="memory_example_uniq")
    flagged = [
        migrations.AddIndex(model_name="memory", index=index),
        migrations.AddConstraint(model_name="memoryrevision", constraint=unique),
        migrations.AddField(model_name="event", name="x", field=models.IntegerField(db_index=True)),
        migrations.RunSQL("CREATE INDEX memory_x ON memories_memory (kind)"),
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL("create unique index e ON memories_event (id)")]
        ),
    ]
    for operation in flagged:
        assert non_concurrent_index_builds(_migration(operation)), operation
    spared = [
        AddIndexConcurrently(model_name="memory", index=index),
        migrations.RunSQL("CREATE INDEX CONCURRENTLY memory_x ON memories_memory (kind)"),
        migrations.AddIndex(model_name="thread", index=index),  # not a large table
        migrations.AddField(model_name="memory", name="x", field=models.IntegerField(null=True)),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.CheckConstraint(condition=models.Q(x__gte=0), name="x_positive"),
        ),
    ]
    for operation in spared:
        assert not non_concurrent_index_builds(_migration(operation)), operation

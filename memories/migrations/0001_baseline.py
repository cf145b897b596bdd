"""The memories app's schema as of the first release: memories and their revisions, threads,
formation runs, events and webhooks, the kind registry, jobs' bookkeeping; the extensions,
triggers, functions and storage settings of memories/sql/; the background jobs' schedules.

It replaces the migrations written before the release (`replaces`): a database that applied
them all is up to date with this one, a new database is built from it alone. A schema change
after it is a new migration beside it, with an upgrade step in
tests/operations/test_upgrade_from_baseline.py (docs/operations.md#upgrading)."""

from pathlib import Path

import django.contrib.postgres.fields
import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import django.db.models.functions.comparison
import django.utils.timezone
import pgvector.django.indexes
import pgvector.django.vector
from django.contrib.postgres.operations import BtreeGinExtension, TrigramExtension
from django.db import migrations, models
from pgvector.django import VectorExtension

import memories.ids
import memories.models.events

# The SQL of the triggers, functions and storage settings: one current definition each, in
# memories/sql/ (a later migration that changes one edits the file and runs it again).
SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


def sql(name: str) -> str:
    return (SQL_DIR / name).read_text(encoding="utf-8")


STORAGE_RESET = """
DROP STATISTICS IF EXISTS memory_owner_category_stats;
ALTER TABLE memories_memory RESET (fillfactor);
"""
OWNER_COUNTS_DROP = """
DROP TRIGGER IF EXISTS memories_ownercount_insert ON memories_memory;
DROP TRIGGER IF EXISTS memories_ownercount_update ON memories_memory;
DROP TRIGGER IF EXISTS memories_ownercount_delete ON memories_memory;
DROP FUNCTION IF EXISTS memories_ownercount_on_insert();
DROP FUNCTION IF EXISTS memories_ownercount_on_update();
DROP FUNCTION IF EXISTS memories_ownercount_on_delete();
"""
SEQUENCES_DROP = """
DROP TRIGGER IF EXISTS memory_sequence_lock ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_insert ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_update ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_delete ON memories_memory;
DROP FUNCTION IF EXISTS memory_sequence_on_insert();
DROP FUNCTION IF EXISTS memory_sequence_on_update();
DROP FUNCTION IF EXISTS memory_sequence_on_delete();
DROP FUNCTION IF EXISTS memory_sequence_lock();
DROP FUNCTION IF EXISTS memory_sequence_refresh(varchar[]);
DROP FUNCTION IF EXISTS memory_sequence_links(varchar[]);
"""
EVENT_POSITIONS_DROP = "DROP SEQUENCE IF EXISTS memories_event_position_seq"
BUILTIN_KINDS_DROP = """
DROP TRIGGER IF EXISTS memories_kind_builtins ON accounts_tenant;
DROP FUNCTION IF EXISTS memories_kind_builtins();
"""
KIND_GUARD_DROP = "DROP FUNCTION IF EXISTS memory_kind_guard(bigint, bigint)"

# The background jobs' django-q2 schedules: name -> (func, args, schedule_type, minutes).
# Pruning often (expired memories are invisible at once anyway, pruning only tidies),
# retention daily, re-embedding hourly (a no-op when nothing is stale), formation and the
# webhook dispatcher every minute (the dispatcher besides the nudges after each commit with
# events). `catch_up=False` lives in Q_CLUSTER.
SCHEDULES = {
    "prune_memories": ("memories.tasks.run_job", "'prune_memories'", "I", 10),
    "purge_retention": ("memories.tasks.run_job", "'purge_retention'", "D", None),
    "reembed": ("memories.tasks.run_job", "'reembed'", "H", None),
    "extract_threads": ("memories.formation.runs.extract_due_threads", None, "I", 1),
    "dispatch_webhooks": ("memories.webhooks.delivery.dispatch_webhooks", None, "I", 1),
}


def create_schedules(apps, schema_editor):
    """Idempotent: a schedule that exists already (perhaps retuned by an operator) stays."""
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (func, args, schedule_type, minutes) in SCHEDULES.items():
        Schedule.objects.get_or_create(
            name=name,
            defaults={
                "func": func,
                "args": args,
                "schedule_type": schedule_type,
                "minutes": minutes,
                "repeats": -1,
            },
        )


def delete_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    for name, (func, *_) in SCHEDULES.items():
        Schedule.objects.filter(name=name, func=func).delete()


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("memories", "0001_extensions"),
        ("memories", "0002_memory_models"),
        ("memories", "0003_job_schedules"),
        ("memories", "0004_owner_counts"),
        ("memories", "0005_memory_live_size_idx"),
        ("memories", "0006_drop_redundant_tenant_indexes"),
        ("memories", "0007_jobrun_tenant_scope"),
        ("memories", "0008_hydrate_order_indexes"),
        ("memories", "0009_tombstone_page_index"),
        ("memories", "0010_revision_versions_renumber"),
        ("memories", "0011_revision_version_unique"),
        ("memories", "0012_memory_evidence"),
        ("memories", "0013_threads"),
        ("memories", "0014_extraction_schedule"),
        ("memories", "0015_idempotency_key_digest_rename"),
        ("memories", "0016_idempotency_key_digests"),
        ("memories", "0017_idempotency_key_digest_length"),
        ("memories", "0018_memory_occurred_at"),
        ("memories", "0019_memory_owner_statistics"),
        ("memories", "0020_memory_hot_access_bumps"),
        ("memories", "0021_memory_fts_per_owner"),
        ("memories", "0022_memory_fts_no_pending_list"),
        ("memories", "0030_extractionrun_offered_ids"),
        ("memories", "0031_extractionrun_applied_ops"),
        ("memories", "0060_memory_review_reason"),
        ("memories", "0061_memory_review_reason_backfill"),
        ("memories", "0062_dailyreads"),
        ("memories", "0070_events"),
        ("memories", "0071_event_position_sequence"),
        ("memories", "0072_webhook_schedule"),
        ("memories", "0080_memory_scope"),
        ("memories", "0081_owner_counts_per_subject"),
        ("memories", "0082_kind_registry"),
        ("memories", "0083_builtin_kinds"),
        ("memories", "0084_memory_kind_guard"),
        ("memories", "0085_memory_kind_single"),
        ("memories", "0086_single_kinds_flagged"),
        ("memories", "0087_memory_requested_expiry"),
        ("memories", "0088_effective_expiry"),
        ("memories", "0089_event_scope"),
        ("memories", "0090_conversation_needs_thread"),
    ]

    dependencies = [
        ("accounts", "0001_baseline"),
        # The schedules below are django-q2's rows.
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        # pgvector for embeddings, pg_trgm for fuzzy text, btree_gin for GIN indexes that
        # lead with a bigint (the full-text indexes' owner).
        VectorExtension(),
        TrigramExtension(),
        BtreeGinExtension(),
        migrations.CreateModel(
            name="Event",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.BigIntegerField(blank=True, null=True)),
                ("type", models.CharField(max_length=32)),
                ("category", models.CharField(blank=True, max_length=40, null=True)),
                ("subject_id", models.CharField(blank=True, max_length=255, null=True)),
                (
                    "scope",
                    models.CharField(
                        choices=[("agent", "Agent"), ("user", "User")],
                        db_default="agent",
                        default="agent",
                        max_length=8,
                    ),
                ),
                ("memory_id", models.CharField(blank=True, max_length=30, null=True)),
                ("version", models.PositiveIntegerField(blank=True, null=True)),
                ("occurred_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("data", models.JSONField(default=dict)),
                (
                    "agent",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.agent",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        models.F("tenant"),
                        models.F("position"),
                        condition=models.Q(("position__isnull", False)),
                        name="event_feed_idx",
                    ),
                    models.Index(
                        models.F("id"),
                        condition=models.Q(("position__isnull", True)),
                        name="event_unsequenced_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.F("memory_id"),
                        condition=models.Q(("memory_id__isnull", False)),
                        name="event_memory_idx",
                    ),
                    models.Index(fields=["tenant", "occurred_at"], name="event_retention_idx"),
                ],
            },
        ),
        migrations.CreateModel(
            name="IdempotencyRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key_digest", models.CharField(max_length=64)),
                ("request_hash", models.CharField(max_length=64)),
                ("response_status", models.PositiveSmallIntegerField()),
                ("response_body", models.JSONField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["created_at"], name="idempotency_created_idx")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "key_digest"), name="idempotency_tenant_key_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="JobRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("job", models.CharField(max_length=64)),
                ("trigger", models.CharField(default="schedule", max_length=32)),
                ("started_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                ("as_of", models.DateTimeField(blank=True, null=True)),
                ("dry_run", models.BooleanField(default=False)),
                ("status", models.CharField(default="running", max_length=16)),
                ("counts", models.JSONField(default=dict)),
                ("tenant_counts", models.JSONField(blank=True, default=dict)),
                ("duration_ms", models.PositiveIntegerField(blank=True, null=True)),
                ("error", models.TextField(blank=True, default="")),
                (
                    "tenant",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        models.F("job"),
                        models.OrderBy(models.F("started_at"), descending=True),
                        name="jobrun_job_recent_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(models.F("started_at"), descending=True),
                        name="jobrun_tenant_recent_idx",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="PruneRun",
            fields=[],
            options={
                "proxy": True,
                "indexes": [],
                "constraints": [],
            },
            bases=("memories.jobrun",),
        ),
        migrations.CreateModel(
            name="Kind",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(max_length=60)),
                (
                    "cardinality",
                    models.CharField(
                        choices=[("single", "Single"), ("multiple", "Multiple")],
                        default="multiple",
                        max_length=8,
                    ),
                ),
                (
                    "memory_type",
                    models.CharField(
                        choices=[
                            ("semantic", "Semantic"),
                            ("episodic", "Episodic"),
                            ("procedural", "Procedural"),
                        ],
                        default="semantic",
                        max_length=12,
                    ),
                ),
                ("description", models.TextField(blank=True, default="")),
                ("schema", models.JSONField(blank=True, null=True)),
                ("default_category", models.CharField(blank=True, max_length=40, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "name"), name="kind_tenant_name_uniq"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("cardinality__in", ["single", "multiple"])),
                        name="kind_cardinality_known",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("memory_type__in", ["semantic", "episodic", "procedural"])
                        ),
                        name="kind_memory_type_known",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Memory",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=memories.ids.new_memory_id,
                        editable=False,
                        max_length=30,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("created_by", models.CharField(max_length=255)),
                ("key", models.CharField(blank=True, max_length=255, null=True)),
                ("category", models.CharField(default="core", max_length=40)),
                ("kind", models.CharField(default="fact", max_length=64)),
                (
                    "scope",
                    models.CharField(
                        choices=[("agent", "Agent"), ("user", "User")],
                        db_default="agent",
                        default="agent",
                        max_length=8,
                    ),
                ),
                ("kind_single", models.BooleanField(db_default=False, default=False)),
                ("text", models.TextField(blank=True, default="")),
                ("data", models.JSONField(blank=True, null=True)),
                (
                    "tags",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=64),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                ("subject_id", models.CharField(blank=True, max_length=255, null=True)),
                ("thread_id", models.CharField(blank=True, max_length=255, null=True)),
                ("importance", models.FloatField(default=0.5)),
                ("confidence", models.FloatField(default=1.0)),
                (
                    "capture_mode",
                    models.CharField(
                        choices=[("explicit", "Explicit"), ("inferred", "Inferred")],
                        default="explicit",
                        max_length=16,
                    ),
                ),
                ("source_provider", models.CharField(blank=True, max_length=100, null=True)),
                ("mentions", models.JSONField(blank=True, default=list)),
                ("occurred_at", models.DateTimeField(blank=True, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("requested_expires_at", models.DateTimeField(blank=True, null=True)),
                ("last_confirmed_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("last_accessed_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("access_count", models.PositiveBigIntegerField(default=0)),
                ("version", models.PositiveIntegerField(default=1)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("active", "Active"),
                            ("tombstoned", "Tombstoned"),
                            ("evicted", "Evicted"),
                            ("expired", "Expired"),
                        ],
                        default="active",
                        max_length=16,
                    ),
                ),
                ("status_changed_at", models.DateTimeField(blank=True, null=True)),
                (
                    "review_state",
                    models.CharField(
                        choices=[
                            ("none", "None"),
                            ("pending", "Pending"),
                            ("approved", "Approved"),
                        ],
                        default="none",
                        max_length=16,
                    ),
                ),
                (
                    "review_reason",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("near_duplicate", "Stored next to a near-duplicate"),
                            ("inferred", "Inferred by the agent"),
                            ("low_confidence", "Low confidence"),
                            ("agent_policy", "Agent policy: every extracted memory is reviewed"),
                        ],
                        db_default="",
                        default="",
                        max_length=20,
                    ),
                ),
                ("size_bytes", models.PositiveIntegerField(default=0)),
                ("content_hash", models.CharField(blank=True, default="", max_length=64)),
                (
                    "embedding",
                    pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True),
                ),
                ("embedding_model", models.CharField(blank=True, default="", max_length=100)),
                ("prev_id", models.CharField(blank=True, max_length=30, null=True)),
                ("next_id", models.CharField(blank=True, max_length=30, null=True)),
                ("context_text", models.TextField(blank=True, null=True)),
                (
                    "search_vector",
                    models.GeneratedField(
                        db_persist=True,
                        expression=django.contrib.postgres.search.CombinedSearchVector(
                            django.contrib.postgres.search.SearchVector(
                                "key", "text", config="english", weight="A"
                            ),
                            "||",
                            django.contrib.postgres.search.SearchVector(
                                "context_text", config="english", weight="D"
                            ),
                            django.contrib.postgres.search.SearchConfig("english"),
                        ),
                        output_field=django.contrib.postgres.search.SearchVectorField(),
                    ),
                ),
                ("tombstone_reason", models.TextField(blank=True, default="")),
                ("tombstoned_by", models.CharField(blank=True, default="", max_length=255)),
                ("tombstoned_at", models.DateTimeField(blank=True, null=True)),
                ("purged_at", models.DateTimeField(blank=True, null=True)),
                ("evidence", models.JSONField(blank=True, null=True)),
                (
                    "agent",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memories",
                        to="accounts.agent",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memories",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        models.F("tenant"),
                        models.F("agent"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status", "active")),
                        name="memory_live_list_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.F("agent"),
                        models.F("category"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status", "active")),
                        name="memory_live_cat_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("agent__isnull", True), ("status", "active")),
                        name="memory_live_workspace_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.F("subject_id"),
                        models.F("agent"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        condition=models.Q(("status", "active")),
                        name="memory_live_subject_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.F("subject_id"),
                        models.F("category"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("scope", "user"), ("status", "active")),
                        name="memory_live_user_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "active")),
                        fields=["tenant", "kind"],
                        name="memory_live_kind_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "active"), ("thread_id__isnull", False)),
                        fields=["tenant", "thread_id"],
                        name="memory_live_thread_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        django.db.models.functions.comparison.Coalesce("agent", models.Value(0)),
                        django.db.models.functions.comparison.Coalesce(
                            "subject_id", models.Value("")
                        ),
                        models.F("thread_id"),
                        django.db.models.functions.comparison.Coalesce("occurred_at", "created_at"),
                        models.F("id"),
                        condition=models.Q(("status", "active"), ("thread_id__isnull", False)),
                        name="memory_sequence_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "active")),
                        fields=["tenant", "agent", "size_bytes"],
                        name="memory_live_size_idx",
                    ),
                    models.Index(fields=["tenant", "content_hash"], name="memory_hash_idx"),
                    models.Index(
                        fields=["tenant", "status", "review_state", "created_at"],
                        name="memory_review_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(
                            django.db.models.functions.comparison.Coalesce(
                                "status_changed_at", "updated_at"
                            ),
                            descending=True,
                        ),
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status", "tombstoned")),
                        name="memory_tombstone_page_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "active"), _negated=True),
                        fields=["tenant", "status", "status_changed_at"],
                        name="memory_inactive_idx",
                    ),
                    models.Index(
                        condition=models.Q(("status", "active"), ("expires_at__isnull", False)),
                        fields=["expires_at"],
                        name="memory_expiry_idx",
                    ),
                    models.Index(
                        condition=models.Q(
                            ("status", "active"), ("category__in", ["daily", "conversation"])
                        ),
                        fields=["category", "updated_at"],
                        name="memory_age_prune_idx",
                    ),
                    django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["agent", "search_vector"],
                        name="memory_fts_owner_idx",
                    ),
                    django.contrib.postgres.indexes.GinIndex(
                        condition=models.Q(("agent__isnull", True), ("status", "active")),
                        fastupdate=False,
                        fields=["tenant", "search_vector"],
                        name="memory_fts_workspace_idx",
                    ),
                    django.contrib.postgres.indexes.GinIndex(
                        condition=models.Q(("scope", "user"), ("status", "active")),
                        fastupdate=False,
                        fields=["subject_id", "search_vector"],
                        name="memory_fts_user_idx",
                    ),
                    pgvector.django.indexes.HnswIndex(
                        condition=models.Q(("status", "active")),
                        ef_construction=64,
                        fields=["embedding"],
                        m=16,
                        name="memory_embedding_hnsw",
                        opclasses=["vector_cosine_ops"],
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("status", "active"), ("key__isnull", False)),
                        fields=("tenant", "agent", "scope", "subject_id", "key"),
                        name="memory_live_key_uniq",
                        nulls_distinct=False,
                    ),
                    models.UniqueConstraint(
                        condition=models.Q(("status", "active"), ("kind_single", True)),
                        fields=("tenant", "agent", "scope", "subject_id", "kind"),
                        name="memory_live_single_uniq",
                        nulls_distinct=False,
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("scope__in", ["agent", "user"])),
                        name="memory_scope_known",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("scope", "agent"),
                            models.Q(
                                ("agent__isnull", True),
                                ("subject_id__isnull", False),
                                models.Q(
                                    ("category__in", ["workspace", "conversation"]), _negated=True
                                ),
                            ),
                            _connector="OR",
                        ),
                        name="memory_user_scope_owner",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("category", "conversation"), _negated=True),
                            models.Q(
                                ("thread_id__isnull", False),
                                models.Q(("thread_id", ""), _negated=True),
                            ),
                            _connector="OR",
                        ),
                        name="memory_conversation_thread",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("importance__gte", 0), ("importance__lte", 1)),
                        name="memory_importance_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("confidence__gte", 0), ("confidence__lte", 1)),
                        name="memory_confidence_range",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("version__gte", 1)), name="memory_version_positive"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("status__in", ["active", "tombstoned", "evicted", "expired"])
                        ),
                        name="memory_status_known",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="MemoryRevision",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("version", models.PositiveIntegerField()),
                ("actor", models.CharField(max_length=255)),
                (
                    "change_type",
                    models.CharField(
                        choices=[
                            ("create", "Create"),
                            ("update", "Update"),
                            ("correct", "Correction"),
                            ("confirm", "Confirm"),
                            ("approve", "Approve"),
                            ("tombstone", "Tombstone"),
                            ("restore", "Restore"),
                            ("expire", "Expiry"),
                            ("evict", "Eviction"),
                            ("purge", "Purge"),
                            ("merge", "Merge"),
                            ("import", "Import"),
                        ],
                        max_length=16,
                    ),
                ),
                ("reason", models.TextField(blank=True, default="")),
                ("before", models.JSONField(blank=True, null=True)),
                ("after", models.JSONField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "memory",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="revisions",
                        to="memories.memory",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="revisions",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tenant", "memory", "id"], name="revision_memory_idx"),
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        name="revision_recent_idx",
                    ),
                    models.Index(
                        fields=["tenant", "actor", "created_at"], name="revision_actor_idx"
                    ),
                    models.Index(
                        fields=["tenant", "change_type", "created_at"], name="revision_type_idx"
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "memory", "version"), name="revision_version_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="OwnerCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tenant_id", models.BigIntegerField()),
                ("owner_id", models.BigIntegerField()),
                ("subject_id", models.CharField(blank=True, default="", max_length=255)),
                ("active", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant_id", "owner_id", "subject_id"), name="ownercount_owner_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Thread",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("thread_id", models.CharField(max_length=255)),
                ("subject_id", models.CharField(blank=True, max_length=255, null=True)),
                ("summary", models.TextField(blank=True, default="")),
                ("summarized_seq", models.PositiveIntegerField(default=0)),
                ("last_seq", models.PositiveIntegerField(default=0)),
                ("extracted_seq", models.PositiveIntegerField(default=0)),
                ("message_count", models.PositiveIntegerField(default=0)),
                ("memories_added", models.PositiveIntegerField(default=0)),
                ("memories_updated", models.PositiveIntegerField(default=0)),
                ("last_message_at", models.DateTimeField(blank=True, null=True)),
                ("last_run_at", models.DateTimeField(blank=True, null=True)),
                ("extraction_due_at", models.DateTimeField(blank=True, null=True)),
                ("ended_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="threads",
                        to="accounts.agent",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(models.F("updated_at"), descending=True),
                        models.OrderBy(models.F("id"), descending=True),
                        name="thread_recent_idx",
                    ),
                    models.Index(fields=["tenant", "subject_id"], name="thread_subject_idx"),
                    models.Index(
                        condition=models.Q(("extraction_due_at__isnull", False)),
                        fields=["extraction_due_at"],
                        name="thread_due_idx",
                    ),
                    models.Index(
                        condition=models.Q(("ended_at__isnull", False)),
                        fields=["ended_at"],
                        name="thread_ended_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        models.F("tenant"),
                        models.F("agent"),
                        django.db.models.functions.comparison.Coalesce(
                            "subject_id", models.Value("")
                        ),
                        models.F("thread_id"),
                        name="thread_identity_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Message",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("seq", models.PositiveIntegerField()),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("user", "User"),
                            ("assistant", "Assistant"),
                            ("system", "System"),
                            ("tool", "Tool"),
                        ],
                        max_length=16,
                    ),
                ),
                ("content", models.TextField()),
                ("name", models.CharField(blank=True, max_length=255, null=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "redactions",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=64),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                ("dedup_hash", models.CharField(max_length=64)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
                (
                    "thread",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="memories.thread",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "thread", "seq"), name="message_thread_seq_uniq"
                    ),
                    models.UniqueConstraint(
                        fields=("tenant", "thread", "dedup_hash"), name="message_thread_dedup_uniq"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ExtractionRun",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("trigger", models.CharField(max_length=16)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("queued", "Queued"),
                            ("running", "Running"),
                            ("done", "Done"),
                            ("failed", "Failed"),
                            ("deferred", "Deferred"),
                        ],
                        default="queued",
                        max_length=16,
                    ),
                ),
                ("model", models.CharField(blank=True, default="", max_length=200)),
                ("prompt_version", models.CharField(blank=True, default="", max_length=64)),
                ("from_seq", models.PositiveIntegerField(default=0)),
                ("to_seq", models.PositiveIntegerField(default=0)),
                ("attempts", models.PositiveSmallIntegerField(default=0)),
                ("prompt_tokens", models.PositiveIntegerField(default=0)),
                ("completion_tokens", models.PositiveIntegerField(default=0)),
                ("llm_ms", models.PositiveIntegerField(default=0)),
                ("server_ms", models.PositiveIntegerField(default=0)),
                ("counts", models.JSONField(blank=True, default=dict)),
                ("answer", models.JSONField(blank=True, null=True)),
                (
                    "offered_ids",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=64),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                ("applied_ops", models.PositiveIntegerField(default=0)),
                ("error_class", models.CharField(blank=True, default="", max_length=200)),
                ("error_message", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.agent",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
                (
                    "thread",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="memories.thread",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        models.F("tenant"),
                        models.F("thread"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        name="extractionrun_thread_idx",
                    ),
                    models.Index(
                        models.F("tenant"),
                        models.OrderBy(models.F("created_at"), descending=True),
                        name="extractionrun_recent_idx",
                    ),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("state__in", ["queued", "running"])),
                        fields=("thread",),
                        name="extractionrun_one_open_uniq",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="WebhookEndpoint",
            fields=[
                (
                    "id",
                    models.CharField(
                        default=memories.models.events.new_webhook_id,
                        editable=False,
                        max_length=30,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("url", models.CharField(max_length=2000)),
                (
                    "events",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=32),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
                ("description", models.CharField(blank=True, default="", max_length=200)),
                ("secret_encrypted", models.TextField()),
                ("created_by", models.CharField(max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("cursor", models.BigIntegerField(default=0)),
                ("failing_since", models.DateTimeField(blank=True, null=True)),
                ("last_success_at", models.DateTimeField(blank=True, null=True)),
                ("disabled_at", models.DateTimeField(blank=True, null=True)),
                ("disabled_reason", models.CharField(blank=True, default="", max_length=200)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(fields=["tenant", "created_at"], name="webhook_tenant_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.BigIntegerField()),
                ("event_type", models.CharField(max_length=32)),
                ("memory_id", models.CharField(blank=True, max_length=30, null=True)),
                (
                    "state",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("delivered", "Delivered"),
                            ("failed", "Failed"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("resend", models.BooleanField(default=False)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("next_attempt_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("first_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("last_status", models.PositiveSmallIntegerField(blank=True, null=True)),
                ("last_error", models.CharField(blank=True, default="", max_length=300)),
                ("delivered_at", models.DateTimeField(blank=True, null=True)),
                (
                    "event",
                    models.ForeignKey(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="memories.event",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
                (
                    "endpoint",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="deliveries",
                        to="memories.webhookendpoint",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("state", "pending")),
                        fields=["next_attempt_at"],
                        name="delivery_due_idx",
                    ),
                    models.Index(
                        condition=models.Q(("resend", False), ("state", "pending")),
                        fields=["endpoint", "memory_id", "position"],
                        name="delivery_memory_order_idx",
                    ),
                    models.Index(
                        models.F("endpoint"),
                        models.OrderBy(models.F("id"), descending=True),
                        name="delivery_log_idx",
                    ),
                    models.Index(fields=["tenant", "created_at"], name="delivery_retention_idx"),
                ],
            },
        ),
        migrations.CreateModel(
            name="DailyReads",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("reads", models.BigIntegerField(default=0)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "day"), name="dailyreads_day_uniq")
                ],
            },
        ),
        migrations.RunSQL(sql("memory_storage.sql"), STORAGE_RESET),
        migrations.RunSQL(sql("owner_counts.sql"), OWNER_COUNTS_DROP),
        migrations.RunSQL(sql("memory_sequences.sql"), SEQUENCES_DROP),
        migrations.RunSQL(sql("event_positions.sql"), EVENT_POSITIONS_DROP),
        migrations.RunSQL(sql("builtin_kinds.sql"), BUILTIN_KINDS_DROP),
        migrations.RunSQL(sql("kind_guard.sql"), KIND_GUARD_DROP),
        migrations.RunPython(create_schedules, delete_schedules),
    ]

"""The accounts app's schema as of the first release: tenants, agents, operators' memberships
and API keys.

It replaces the migrations written before the release (`replaces`): a database that applied
them all is up to date with this one, a new database is built from it alone. A schema change
after it is a new migration beside it, with an upgrade step in
tests/operations/test_upgrade_from_baseline.py (docs/operations.md#upgrading)."""

import django.contrib.postgres.fields
import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import accounts.models


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("accounts", "0001_initial"),
        ("accounts", "0002_agent_extraction_policy"),
        ("accounts", "0010_agent_extraction_max_operations"),
        ("accounts", "0011_agent_block_limits"),
        ("accounts", "0012_agent_formation_context"),
        ("accounts", "0013_retention_policies"),
        ("accounts", "0014_tenant_user_cap"),
        ("accounts", "0015_tenant_kinds_version"),
        ("accounts", "0016_slugs_and_categories_matched_whole"),
    ]

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="Tenant",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "slug",
                    models.CharField(
                        max_length=63,
                        unique=True,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9][a-z0-9_-]{0,62}\\Z", "Use a-z, 0-9, _ and -."
                            )
                        ],
                    ),
                ),
                ("name", models.CharField(blank=True, max_length=200)),
                ("workspace_cap", models.PositiveIntegerField(default=10000)),
                ("extraction_daily_token_budget", models.PositiveBigIntegerField(default=0)),
                ("user_cap", models.PositiveIntegerField(default=1000)),
                (
                    "max_retention",
                    models.JSONField(
                        blank=True, default=dict, validators=[accounts.models.validate_retention]
                    ),
                ),
                ("kinds_version", models.PositiveBigIntegerField(default=0)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
        migrations.CreateModel(
            name="Agent",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "slug",
                    models.CharField(
                        max_length=63,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[a-z0-9][a-z0-9_-]{0,62}\\Z", "Use a-z, 0-9, _ and -."
                            )
                        ],
                    ),
                ),
                ("name", models.CharField(blank=True, max_length=200)),
                ("entry_cap", models.PositiveIntegerField(default=1000)),
                ("hydration_budget_bytes", models.PositiveIntegerField(default=8000)),
                (
                    "default_category",
                    models.CharField(
                        default="core",
                        max_length=40,
                        validators=[django.core.validators.RegexValidator("^[a-z0-9_-]{1,40}\\Z")],
                    ),
                ),
                (
                    "dedup_threshold",
                    models.FloatField(
                        default=0.9,
                        validators=[
                            django.core.validators.MinValueValidator(0.0),
                            django.core.validators.MaxValueValidator(1.0),
                        ],
                    ),
                ),
                ("default_ttl", models.DurationField(blank=True, null=True)),
                (
                    "extraction",
                    models.CharField(
                        choices=[("off", "Off"), ("review", "Review"), ("auto", "Auto")],
                        default="auto",
                        max_length=8,
                    ),
                ),
                ("extraction_idle_seconds", models.PositiveIntegerField(default=120)),
                (
                    "extraction_min_confidence",
                    models.FloatField(
                        default=0.5,
                        validators=[
                            django.core.validators.MinValueValidator(0.0),
                            django.core.validators.MaxValueValidator(1.0),
                        ],
                    ),
                ),
                (
                    "review_below",
                    models.FloatField(
                        default=0.8,
                        validators=[
                            django.core.validators.MinValueValidator(0.0),
                            django.core.validators.MaxValueValidator(1.0),
                        ],
                    ),
                ),
                (
                    "extraction_categories",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(
                            max_length=40,
                            validators=[
                                django.core.validators.RegexValidator("^[a-z0-9_-]{1,40}\\Z")
                            ],
                        ),
                        blank=True,
                        default=accounts.models.default_extraction_categories,
                        size=None,
                    ),
                ),
                (
                    "summary_threshold_bytes",
                    models.PositiveIntegerField(
                        default=16000, validators=[django.core.validators.MinValueValidator(1000)]
                    ),
                ),
                (
                    "extraction_max_operations",
                    models.PositiveIntegerField(
                        default=50,
                        validators=[
                            django.core.validators.MinValueValidator(1),
                            django.core.validators.MaxValueValidator(1000),
                        ],
                    ),
                ),
                ("core_max_entries", models.PositiveIntegerField(default=20)),
                ("core_max_chars", models.PositiveIntegerField(default=4000)),
                ("archival_max_chars", models.PositiveIntegerField(default=8000)),
                (
                    "context_messages",
                    models.PositiveIntegerField(
                        default=20, validators=[django.core.validators.MaxValueValidator(200)]
                    ),
                ),
                ("formation_user_scope", models.BooleanField(default=True)),
                (
                    "max_retention",
                    models.JSONField(
                        blank=True, default=dict, validators=[accounts.models.validate_retention]
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "reads_from",
                    models.ManyToManyField(blank=True, related_name="readers", to="accounts.agent"),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="agents",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "slug"), name="agent_tenant_slug_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="Membership",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("owner", "Owner"),
                            ("admin", "Admin"),
                            ("reviewer", "Reviewer"),
                            ("viewer", "Viewer"),
                        ],
                        default="viewer",
                        max_length=16,
                    ),
                ),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="memberships",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "user"), name="membership_tenant_user_uniq"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ApiKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.CharField(blank=True, max_length=200)),
                ("prefix", models.CharField(max_length=16, unique=True)),
                ("key_hash", models.CharField(max_length=64)),
                (
                    "scopes",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(
                            choices=[("read", "Read"), ("write", "Write"), ("admin", "Admin")],
                            max_length=16,
                        ),
                        default=list,
                        size=None,
                    ),
                ),
                ("subject_id", models.CharField(blank=True, max_length=255, null=True)),
                ("created_by", models.CharField(blank=True, max_length=255)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("last_used_at", models.DateTimeField(blank=True, null=True)),
                ("memory_ttl", models.DurationField(blank=True, null=True)),
                (
                    "agent",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_keys",
                        to="accounts.agent",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="api_keys",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["tenant", "agent", "-created_at"], name="apikey_tenant_agent_idx"
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("scopes__contained_by", ["read", "write", "admin"])),
                        name="apikey_scopes_known",
                    )
                ],
            },
        ),
    ]

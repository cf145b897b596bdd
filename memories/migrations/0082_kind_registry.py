"""The kind registry: per tenant, the kinds of memory and their rules."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0015_tenant_kinds_version"),
        ("memories", "0081_owner_counts_per_subject"),
    ]

    operations = [
        migrations.CreateModel(
            name="Kind",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
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
    ]

"""User scope: a memory belongs to its agent (`agent`, the default: every existing
memory) or to its subject across every agent of the tenant (`user`: no agent, a subject, never
a workspace or conversation memory). The keyed-upsert slot gains the scope, so a subject's user
memory and a workspace memory about that subject may use one key; the subject's user memories
get their own list and full-text indexes."""

import django.contrib.postgres.indexes
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0015_tenant_kinds_version"),
        ("memories", "0072_webhook_schedule"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="scope",
            field=models.CharField(
                choices=[("agent", "Agent"), ("user", "User")],
                db_default="agent",
                default="agent",
                max_length=8,
            ),
        ),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.CheckConstraint(
                condition=models.Q(("scope__in", ["agent", "user"])), name="memory_scope_known"
            ),
        ),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("scope", "agent"),
                    models.Q(
                        ("agent__isnull", True),
                        ("subject_id__isnull", False),
                        models.Q(("category__in", ["workspace", "conversation"]), _negated=True),
                    ),
                    _connector="OR",
                ),
                name="memory_user_scope_owner",
            ),
        ),
        migrations.RemoveConstraint(model_name="memory", name="memory_live_key_uniq"),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "active"), ("key__isnull", False)),
                fields=("tenant", "agent", "scope", "subject_id", "key"),
                name="memory_live_key_uniq",
                nulls_distinct=False,
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                models.F("tenant"),
                models.F("subject_id"),
                models.F("category"),
                models.OrderBy(models.F("updated_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(("scope", "user"), ("status", "active")),
                name="memory_live_user_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=django.contrib.postgres.indexes.GinIndex(
                condition=models.Q(("scope", "user"), ("status", "active")),
                fastupdate=False,
                fields=["subject_id", "search_vector"],
                name="memory_fts_user_idx",
            ),
        ),
    ]

"""`single` kinds: one live memory per (tenant, owner, scope, subject, kind),
enforced by a partial unique index. An index cannot look at the registry, so the memory row
carries what it needs (`kind_single`, written with every write). Also an index of a tenant's
live memories by kind (the Kinds page's counts, a kind change's checks)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0084_memory_kind_guard"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="kind_single",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.AddConstraint(
            model_name="memory",
            constraint=models.UniqueConstraint(
                condition=models.Q(("status", "active"), ("kind_single", True)),
                fields=("tenant", "agent", "scope", "subject_id", "kind"),
                name="memory_live_single_uniq",
                nulls_distinct=False,
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("status", "active")),
                fields=["tenant", "kind"],
                name="memory_live_kind_idx",
            ),
        ),
    ]

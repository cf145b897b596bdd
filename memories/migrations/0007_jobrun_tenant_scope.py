import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    """Job runs scoped to a tenant (console `Run now`) and each tenant's share of a global run."""

    dependencies = [
        ("accounts", "0001_initial"),
        ("memories", "0006_drop_redundant_tenant_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="tenant",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="accounts.tenant",
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="tenant_counts",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(
                models.F("tenant"),
                models.OrderBy(models.F("started_at"), descending=True),
                name="jobrun_tenant_recent_idx",
            ),
        ),
    ]

"""The kind registry's version, cached with the tenant (docs/memory-model.md#kinds)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0014_tenant_user_cap"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="kinds_version",
            field=models.PositiveBigIntegerField(default=0),
        ),
    ]

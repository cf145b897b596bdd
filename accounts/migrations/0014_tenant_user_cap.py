"""The cap of user-scoped memories per subject (docs/memory-model.md#scopes-agent-and-user)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0013_retention_policies"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="user_cap",
            field=models.PositiveIntegerField(default=1000),
        ),
    ]

"""The cap of user-scoped memories per subject (SPEC §13.2)."""

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

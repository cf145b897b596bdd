"""Formation's context window and user scope per agent."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0011_agent_block_limits"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="context_messages",
            field=models.PositiveIntegerField(
                default=20, validators=[django.core.validators.MaxValueValidator(200)]
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="formation_user_scope",
            field=models.BooleanField(default=True),
        ),
    ]

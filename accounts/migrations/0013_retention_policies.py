"""Retention policies: `max_retention` per tenant and agent, a key's `memory_ttl`."""

from django.db import migrations, models

import accounts.models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0012_agent_formation_context"),
    ]

    operations = [
        migrations.AddField(
            model_name="tenant",
            name="max_retention",
            field=models.JSONField(
                blank=True, default=dict, validators=[accounts.models.validate_retention]
            ),
        ),
        migrations.AddField(
            model_name="agent",
            name="max_retention",
            field=models.JSONField(
                blank=True, default=dict, validators=[accounts.models.validate_retention]
            ),
        ),
        migrations.AddField(
            model_name="apikey",
            name="memory_ttl",
            field=models.DurationField(blank=True, null=True),
        ),
    ]

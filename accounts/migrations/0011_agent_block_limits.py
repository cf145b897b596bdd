"""Hydrate's block limits per agent (docs/memory-model.md#block-limits-what-hydrate-loads)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0010_agent_extraction_max_operations"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="core_max_entries",
            field=models.PositiveIntegerField(default=20),
        ),
        migrations.AddField(
            model_name="agent",
            name="core_max_chars",
            field=models.PositiveIntegerField(default=4000),
        ),
        migrations.AddField(
            model_name="agent",
            name="archival_max_chars",
            field=models.PositiveIntegerField(default=8000),
        ),
    ]

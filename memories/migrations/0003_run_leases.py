"""Leased claims of running runs, used instead of session advisory locks behind a
transaction-mode pooler (memories/run_liveness.py). A new, empty table: nothing to backfill."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0002_rate_limit_counters"),
    ]

    operations = [
        migrations.CreateModel(
            name="RunLease",
            fields=[
                ("name", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("owner", models.CharField(max_length=32)),
                ("until", models.DateTimeField()),
            ],
        ),
    ]

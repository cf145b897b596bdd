"""Reads counted per tenant and UTC day (`DailyReads`), for the console dashboard's chart."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_agent_extraction_policy"),
        ("memories", "0061_memory_review_reason_backfill"),
    ]

    operations = [
        migrations.CreateModel(
            name="DailyReads",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("day", models.DateField()),
                ("reads", models.BigIntegerField(default=0)),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="accounts.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("tenant", "day"), name="dailyreads_day_uniq")
                ],
            },
        ),
    ]

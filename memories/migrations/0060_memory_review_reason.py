"""Memories record why they wait for review (`review_reason`, set with `review_state=pending`).

A constant database default: PostgreSQL adds the column without rewriting the table, and the
jobs' and the bench's SQL inserts, which name their columns, need not name this one.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0031_extractionrun_applied_ops"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="review_reason",
            field=models.CharField(
                blank=True,
                choices=[
                    ("near_duplicate", "Stored next to a near-duplicate"),
                    ("inferred", "Inferred by the agent"),
                    ("low_confidence", "Low confidence"),
                    ("agent_policy", "Agent policy: every extracted memory is reviewed"),
                ],
                db_default="",
                default="",
                max_length=20,
            ),
        ),
    ]

"""An extraction run records how many of its answer's operations are applied: they are applied
in batches, each committed with this count, so a retried run resumes after the last batch."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0030_extractionrun_offered_ids"),
    ]

    operations = [
        migrations.AddField(
            model_name="extractionrun",
            name="applied_ops",
            field=models.PositiveIntegerField(default=0),
        ),
    ]

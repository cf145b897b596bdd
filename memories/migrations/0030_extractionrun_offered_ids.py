"""An extraction run keeps the ids of the memories its prompt offered as changeable,
next to the model's answer, so that a retried run judges the kept answer by what the model was
shown. A run kept from before has none: its update, forget and confirm operations are dropped as
`out_of_scope` (the safe reading of "not offered")."""

import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0022_memory_fts_no_pending_list"),
    ]

    operations = [
        migrations.AddField(
            model_name="extractionrun",
            name="offered_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.CharField(max_length=64), blank=True, default=list, size=None
            ),
        ),
    ]

"""Agent policy `extraction_max_operations` (default 50): the most operations one model answer
may apply; the rest are dropped and counted (`over_limit`)."""

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_agent_extraction_policy"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="extraction_max_operations",
            field=models.PositiveIntegerField(
                default=50,
                validators=[
                    django.core.validators.MinValueValidator(1),
                    django.core.validators.MaxValueValidator(1000),
                ],
            ),
        ),
    ]

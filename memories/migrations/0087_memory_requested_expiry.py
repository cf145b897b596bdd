"""Retention: `expires_at` becomes the effective expiry (what the writer asked for,
bounded by retention policies and the category's lifetime) and `requested_expires_at` keeps what
the writer asked for, to recompute the effective one when a policy changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0086_single_kinds_flagged"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="requested_expires_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]

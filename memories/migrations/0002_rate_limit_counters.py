"""The per-key rate limit's counters, shared by every node (memories/ratelimit.py): UNLOGGED, as
a counter is worth no WAL (lost in a crash or on a standby, it only restarts a key's minute)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0001_baseline"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateLimitCounter",
            fields=[
                ("bucket", models.CharField(max_length=64, primary_key=True, serialize=False)),
                ("window_start", models.DateTimeField()),
                ("hits", models.BigIntegerField()),
            ],
        ),
        migrations.RunSQL(
            "ALTER TABLE memories_ratelimitcounter SET UNLOGGED",
            "ALTER TABLE memories_ratelimitcounter SET LOGGED",
        ),
    ]

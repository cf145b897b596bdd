from django.db import migrations, models


class Migration(migrations.Migration):
    """Hydrate's probe for entries small enough to fit the budget left (memories/retrieval/hydrate.py)."""

    dependencies = [("memories", "0004_owner_counts")]

    operations = [
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("status", "active")),
                fields=["tenant", "agent", "size_bytes"],
                name="memory_live_size_idx",
            ),
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    """One revision per version of a memory (0010 renumbered the histories that repeated one)."""

    dependencies = [("memories", "0010_revision_versions_renumber")]

    operations = [
        migrations.AddConstraint(
            model_name="memoryrevision",
            constraint=models.UniqueConstraint(
                fields=["tenant", "memory", "version"], name="revision_version_uniq"
            ),
        ),
    ]

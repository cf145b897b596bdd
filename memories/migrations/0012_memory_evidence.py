from django.db import migrations, models


class Migration(migrations.Migration):
    """Memories formed from a conversation name their evidence messages."""

    dependencies = [("memories", "0011_revision_version_unique")]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="evidence",
            field=models.JSONField(blank=True, null=True),
        ),
    ]

from django.db import migrations, models


class Migration(migrations.Migration):
    """A key digest is 64 hex characters (0013 converted every stored key)."""

    dependencies = [("memories", "0016_idempotency_key_digests")]

    operations = [
        migrations.AlterField(
            model_name="idempotencyrecord",
            name="key_digest",
            field=models.CharField(max_length=64),
        ),
    ]

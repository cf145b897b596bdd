from django.db import migrations, models


class Migration(migrations.Migration):
    """`IdempotencyRecord.key` becomes `key_digest` (0016_idempotency_key_digests
    replaces the clear keys by digests)."""

    dependencies = [("memories", "0014_extraction_schedule")]

    operations = [
        migrations.RemoveConstraint(
            model_name="idempotencyrecord", name="idempotency_tenant_key_uniq"
        ),
        migrations.RenameField(
            model_name="idempotencyrecord", old_name="key", new_name="key_digest"
        ),
        migrations.AddConstraint(
            model_name="idempotencyrecord",
            constraint=models.UniqueConstraint(
                fields=["tenant", "key_digest"], name="idempotency_tenant_key_uniq"
            ),
        ),
    ]

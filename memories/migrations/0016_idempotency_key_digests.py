from django.db import migrations
from django.utils.crypto import salted_hmac

BATCH = 1000


def digest_keys(apps, schema_editor):
    """Replace each stored clear `Idempotency-Key` by its digest, so the records (kept 24 h)
    go on replaying across the upgrade and no pasted credential stays in the table.

    The digest is `memories.idempotency.key_digest` as of this migration, spelt out here
    because a migration must not change when that code does."""
    Record = apps.get_model("memories", "IdempotencyRecord")
    last = 0
    while batch := list(
        Record.objects.filter(pk__gt=last).order_by("pk").only("tenant_id", "key_digest")[:BATCH]
    ):
        for record in batch:
            record.key_digest = salted_hmac(
                "memoryhub.idempotency-key",
                f"{record.tenant_id}:{record.key_digest}",
                algorithm="sha256",
            ).hexdigest()
        Record.objects.bulk_update(batch, ["key_digest"])
        last = batch[-1].pk


def drop_records(apps, schema_editor):
    """A digest cannot be turned back into its key: the stored responses go (a retry then runs
    again, as after 24 h)."""
    apps.get_model("memories", "IdempotencyRecord").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("memories", "0015_idempotency_key_digest_rename")]

    operations = [migrations.RunPython(digest_keys, drop_records)]

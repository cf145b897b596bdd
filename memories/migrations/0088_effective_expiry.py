"""Existing memories: what they asked for is their `expires_at`; their effective expiry adds the
lifetime of `daily` (72 h) and `conversation` (24 h) memories after their last write, which
reads now enforce like `expires_at`. No policy exists yet. A memory already past
its lifetime becomes invisible at once, as it would have at the next prune."""

from django.db import migrations

FORWARD = (
    "UPDATE memories_memory SET requested_expires_at = expires_at WHERE expires_at IS NOT NULL",
    """
UPDATE memories_memory
SET expires_at = LEAST(
    expires_at,
    updated_at + CASE category WHEN 'daily' THEN interval '72 hours'
                               ELSE interval '24 hours' END)
WHERE status = 'active' AND category IN ('daily', 'conversation')
""",
)
BACKWARD = """
UPDATE memories_memory SET expires_at = requested_expires_at
WHERE status = 'active' AND category IN ('daily', 'conversation');
"""


def effective_expiry(apps, schema_editor):
    for statement in FORWARD:
        schema_editor.execute(statement)


def requested_expiry(apps, schema_editor):
    schema_editor.execute(BACKWARD)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0087_memory_requested_expiry"),
    ]

    operations = [migrations.RunPython(effective_expiry, requested_expiry)]

"""Events carry their memory's scope: the owner/subject rule that filters the
change feed (`visibility.visible_q`) tells a subject's user memories by `scope`, and a user
memory's events must reach every agent acting for its subject, as the memory does.

The column defaults in the database ('agent', what every event written before user scope
was), so SQL that inserts events without it keeps working. Existing events of a user memory
take the scope of their memory where it still exists; where retention or a purge deleted it,
the scope its public object recorded (`data`), which events written since user scope exist
hold."""

from django.db import migrations, models

BACKFILL = (
    """
UPDATE memories_event e SET scope = m.scope
FROM memories_memory m
WHERE m.id = e.memory_id AND m.tenant_id = e.tenant_id AND m.scope <> e.scope
""",
    """
UPDATE memories_event e SET scope = 'user'
WHERE e.memory_id IS NOT NULL AND e.scope <> 'user' AND e.data ->> 'scope' = 'user'
  AND NOT EXISTS (
      SELECT 1 FROM memories_memory m WHERE m.id = e.memory_id AND m.tenant_id = e.tenant_id
  )
""",
)


def backfill(apps, schema_editor):
    for statement in BACKFILL:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0088_effective_expiry"),
    ]

    operations = [
        migrations.AddField(
            model_name="event",
            name="scope",
            field=models.CharField(
                choices=[("agent", "Agent"), ("user", "User")],
                db_default="agent",
                default="agent",
                max_length=8,
            ),
        ),
        # Backwards there is nothing to undo: the column goes.
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]

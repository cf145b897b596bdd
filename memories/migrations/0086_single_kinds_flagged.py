"""Existing memories of the built-in `single` kinds (`UserProfile`, `AgentInstructions`, free
labels until now) become the single record of their owner and subject where they are the only
live one; where several exist none is flagged, all stay as they were (valid and visible), and
the next store of that kind starts the single record. No memory changes owner, visibility,
version or content."""

from django.db import migrations

FLAG = """
UPDATE memories_memory m SET kind_single = true
FROM (
    SELECT tenant_id, agent_id, scope, subject_id, kind
    FROM memories_memory
    WHERE status = 'active' AND kind IN ('UserProfile', 'AgentInstructions')
    GROUP BY tenant_id, agent_id, scope, subject_id, kind
    HAVING count(*) = 1
) one
WHERE m.status = 'active' AND m.kind = one.kind AND m.tenant_id = one.tenant_id
  AND m.agent_id IS NOT DISTINCT FROM one.agent_id AND m.scope = one.scope
  AND m.subject_id IS NOT DISTINCT FROM one.subject_id
"""


def flag_single_records(apps, schema_editor):
    schema_editor.execute(FLAG)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0085_memory_kind_single"),
    ]

    operations = [migrations.RunPython(flag_single_records, migrations.RunPython.noop)]

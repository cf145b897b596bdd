"""Extended statistics on (agent_id, category): the workspace rule (`agent_id IS NULL AND category =
'workspace'`) names two columns that go together, and without these PostgreSQL multiplies their
selectivities as if independent. At 100k memories (5k of them the workspace's) it estimated ~160
workspace rows and sorted all 5,000 for a list page instead of walking `memory_live_workspace_idx`
newest first, many times faster (docs/performance.md#code-figures). The MCV list covers `IS NULL`
conditions, which `dependencies` statistics do not."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0018_memory_occurred_at")]

    operations = [
        migrations.RunSQL(
            "CREATE STATISTICS IF NOT EXISTS memory_owner_category_stats (mcv) "
            "ON agent_id, category FROM memories_memory; ANALYZE memories_memory",
            "DROP STATISTICS IF EXISTS memory_owner_category_stats",
        )
    ]

"""Reads' access bumps (`last_accessed_at`, `access_count`: memories/access.py) as HOT updates.

An UPDATE that changes an indexed column, or finds no room on the row's page, writes a new entry
into every index of the table: the HNSW graph, the GIN index and a dozen B-trees. Under a
mixed load that was a large share of PostgreSQL's CPU, spent on bumping access stamps
(docs/performance.md#code-figures). Two changes make a bump a heap-only tuple update:

- `memory_live_cold_idx` (tenant, agent, last_accessed_at, updated_at) goes. Eviction never used
  it: its order starts with "non-core first" (`eviction.eviction_order`), which the index cannot
  give, so PostgreSQL sorts the owner's live rows either way (the same plan and time with or
  without it).
- fillfactor 75: a memory row is ~2 kB (its 384-dimension vector alone 1.5 kB), so a full page
  holds four and has no room for a new version of any. At 75 % a page takes three and keeps room
  for one updated row (the old versions are pruned in place). The table grows by a third; pages
  written before this migration keep their fill until rewritten (VACUUM FULL or pg_repack).

With both, nearly every bump is HOT (none before: the index named the column), and
PostgreSQL's CPU a request under the mixed load falls accordingly (the figures:
docs/performance.md#code-figures).
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("memories", "0019_memory_owner_statistics")]

    operations = [
        migrations.RemoveIndex(model_name="memory", name="memory_live_cold_idx"),
        migrations.RunSQL(
            "ALTER TABLE memories_memory SET (fillfactor = 75)",
            "ALTER TABLE memories_memory RESET (fillfactor)",
        ),
    ]

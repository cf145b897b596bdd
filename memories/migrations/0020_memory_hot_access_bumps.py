"""Reads' access bumps (`last_accessed_at`, `access_count`: memories/access.py) as HOT updates.

An UPDATE that changes an indexed column, or finds no room on the row's page, writes a new entry
into every index of the table: the HNSW graph, the GIN index and a dozen B-trees, ~1 ms a row.
Under a mixed load that was half of PostgreSQL's CPU (4 of 8.4 ms a request), spent on bumping
access stamps. Two changes make a bump a heap-only tuple update:

- `memory_live_cold_idx` (tenant, agent, last_accessed_at, updated_at) goes. Eviction never used
  it: its order starts with "non-core first" (`eviction.eviction_order`), which the index cannot
  give, so PostgreSQL sorts the owner's live rows either way (the same plan and time with or
  without it, 9,500 rows: 12.4 against 12.9 ms).
- fillfactor 75: a memory row is ~2 kB (its 384-dimension vector alone 1.5 kB), so a full page
  holds four and has no room for a new version of any. At 75 % a page takes three and keeps room
  for one updated row (the old versions are pruned in place). The table grows by a third; pages
  written before this migration keep their fill until rewritten (VACUUM FULL or pg_repack).

Measured (`bench --load`, 8 clients, local embedder): PostgreSQL 8.4 → 5.0 ms of CPU a request;
93 % of the bumps HOT (none before: the index named the column).
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

-- How the memories table is stored and planned (no function, no trigger).
--
-- fillfactor 75: a read's access bump (last_accessed_at, access_count: memories/access.py) is
-- then a heap-only (HOT) update. A memory row is ~2 kB (its 384-dimension vector alone
-- 1.5 kB), so a full page holds four and has no room for a new version of any; at 75 % a page
-- takes three and keeps room for one updated row. No index names the bumped columns, which
-- HOT needs too (docs/performance.md#code-figures).
ALTER TABLE memories_memory SET (fillfactor = 75);

-- Extended statistics on (agent_id, category): the workspace rule (agent_id IS NULL AND
-- category = 'workspace') names two columns that go together, and without these PostgreSQL
-- multiplies their selectivities as if independent and sorts every workspace row for a list
-- page instead of walking memory_live_workspace_idx (docs/performance.md#code-figures). The
-- MCV list covers IS NULL conditions, which dependencies statistics do not.
CREATE STATISTICS IF NOT EXISTS memory_owner_category_stats (mcv)
    ON agent_id, category FROM memories_memory;

-- Per-owner count of active memories (memories_ownercount), kept exact by statement-level
-- triggers on memories_memory.
--
-- The store-time caps read one row instead of counting an owner's memories on every store:
-- an agent's memories count under (tenant, agent, ''), the workspace's under (tenant, 0, ''),
-- a subject's user memories under (tenant, -1, subject). Statement triggers with transition
-- tables aggregate once per statement, so bulk loads and batched jobs pay one upsert per owner
-- and statement; an UPDATE that changes no status (a read bumping last_accessed_at) writes
-- nothing. Upserts run in (tenant, owner, subject) order so concurrent batches take the counter
-- rows' locks in one order.

CREATE OR REPLACE FUNCTION memories_ownercount_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memories_ownercount (tenant_id, owner_id, subject_id, active)
    SELECT tenant_id, owner_id, subject_id, sum(delta) FROM (
        SELECT tenant_id,
               CASE WHEN scope = 'user' THEN -1 ELSE COALESCE(agent_id, 0) END AS owner_id,
               CASE WHEN scope = 'user' THEN subject_id ELSE '' END AS subject_id,
               1 AS delta
        FROM new_rows WHERE status = 'active'
    ) d
    GROUP BY tenant_id, owner_id, subject_id
    HAVING sum(delta) <> 0
    ORDER BY tenant_id, owner_id, subject_id
    ON CONFLICT (tenant_id, owner_id, subject_id)
    DO UPDATE SET active = memories_ownercount.active + EXCLUDED.active;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memories_ownercount_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memories_ownercount (tenant_id, owner_id, subject_id, active)
    SELECT tenant_id, owner_id, subject_id, sum(delta) FROM (
        SELECT tenant_id,
               CASE WHEN scope = 'user' THEN -1 ELSE COALESCE(agent_id, 0) END AS owner_id,
               CASE WHEN scope = 'user' THEN subject_id ELSE '' END AS subject_id,
               1 AS delta
        FROM new_rows WHERE status = 'active'
        UNION ALL
        SELECT tenant_id,
               CASE WHEN scope = 'user' THEN -1 ELSE COALESCE(agent_id, 0) END AS owner_id,
               CASE WHEN scope = 'user' THEN subject_id ELSE '' END AS subject_id,
               -1 AS delta
        FROM old_rows WHERE status = 'active'
    ) d
    GROUP BY tenant_id, owner_id, subject_id
    HAVING sum(delta) <> 0
    ORDER BY tenant_id, owner_id, subject_id
    ON CONFLICT (tenant_id, owner_id, subject_id)
    DO UPDATE SET active = memories_ownercount.active + EXCLUDED.active;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memories_ownercount_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memories_ownercount (tenant_id, owner_id, subject_id, active)
    SELECT tenant_id, owner_id, subject_id, sum(delta) FROM (
        SELECT tenant_id,
               CASE WHEN scope = 'user' THEN -1 ELSE COALESCE(agent_id, 0) END AS owner_id,
               CASE WHEN scope = 'user' THEN subject_id ELSE '' END AS subject_id,
               -1 AS delta
        FROM old_rows WHERE status = 'active'
    ) d
    GROUP BY tenant_id, owner_id, subject_id
    HAVING sum(delta) <> 0
    ORDER BY tenant_id, owner_id, subject_id
    ON CONFLICT (tenant_id, owner_id, subject_id)
    DO UPDATE SET active = memories_ownercount.active + EXCLUDED.active;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_ownercount_insert AFTER INSERT ON memories_memory
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_insert();
CREATE OR REPLACE TRIGGER memories_ownercount_update AFTER UPDATE ON memories_memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_update();
CREATE OR REPLACE TRIGGER memories_ownercount_delete AFTER DELETE ON memories_memory
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_delete();

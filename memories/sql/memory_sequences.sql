-- Sequences: the neighbours of a memory in its thread.
--
-- Memories of one owner, subject and thread_id form a sequence ordered by occurred_at, else
-- created_at (then id). Each live memory of a thread holds its neighbours' ids (prev_id,
-- next_id) and their texts (context_text, each capped: the context is a hint, not a second
-- copy of a long memory), which the full-text document takes in at weight D (the memory's own
-- key and text at weight A), so a short reply is found by the words of the turn it answers.
--
-- Triggers keep the links current on every write path (store, PATCH, corrections, forget,
-- restore, purge, thread end, eviction, the prune and retention jobs, import): after each
-- statement, the memories it inserted, deleted, or changed in a way that moves them in or out
-- of a sequence (text, status, thread, owner, subject, time) are refreshed together with their
-- old and new neighbours; a refresh's own UPDATE (a nested trigger) stops there, and links that
-- any other statement writes (a stale copy of a row saved back) are redone.
--
-- Writers into one sequence are serialised by a transaction advisory lock on the sequence's
-- key, concat_ws(':', 'seq', tenant_id, COALESCE(agent_id, 0), COALESCE(subject_id, ''),
-- thread_id), taken by an insert before its row is written; memories/services/sequences.py
-- spells the same key (a test holds them equal).

CREATE OR REPLACE FUNCTION memory_sequence_links(ids varchar[])
RETURNS TABLE (id varchar, prev_id varchar, next_id varchar, context_text text)
LANGUAGE sql STABLE AS $$
    SELECT s.id, p.id, n.id,
           NULLIF(concat_ws(' ', left(p.text, 2000), left(n.text, 2000)), '')
    FROM memories_memory s
    LEFT JOIN LATERAL (
        SELECT x.id, x.text FROM memories_memory x
        WHERE x.tenant_id = s.tenant_id AND COALESCE(x.agent_id, 0) = COALESCE(s.agent_id, 0)
          AND COALESCE(x.subject_id, '') = COALESCE(s.subject_id, '')
          AND x.thread_id = s.thread_id AND x.status = 'active'
          AND (COALESCE(x.occurred_at, x.created_at), x.id)
              < (COALESCE(s.occurred_at, s.created_at), s.id)
        ORDER BY COALESCE(x.occurred_at, x.created_at) DESC, x.id DESC LIMIT 1) p ON true
    LEFT JOIN LATERAL (
        SELECT x.id, x.text FROM memories_memory x
        WHERE x.tenant_id = s.tenant_id AND COALESCE(x.agent_id, 0) = COALESCE(s.agent_id, 0)
          AND COALESCE(x.subject_id, '') = COALESCE(s.subject_id, '')
          AND x.thread_id = s.thread_id AND x.status = 'active'
          AND (COALESCE(x.occurred_at, x.created_at), x.id)
              > (COALESCE(s.occurred_at, s.created_at), s.id)
        ORDER BY COALESCE(x.occurred_at, x.created_at) ASC, x.id ASC LIMIT 1) n ON true
    WHERE s.id = ANY(ids) AND s.status = 'active' AND s.thread_id IS NOT NULL
$$;

CREATE OR REPLACE FUNCTION memory_sequence_refresh(seeds varchar[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    targets varchar[];
BEGIN
    IF seeds IS NULL OR cardinality(seeds) = 0 THEN
        RETURN;
    END IF;
    -- The seeds and their neighbours now: whoever may have gained or lost a neighbour.
    WITH l AS (SELECT * FROM memory_sequence_links(seeds))
    SELECT array_agg(DISTINCT t ORDER BY t) INTO targets FROM (
        SELECT unnest(seeds) AS t UNION SELECT prev_id FROM l UNION SELECT next_id FROM l
    ) u WHERE t IS NOT NULL;
    UPDATE memories_memory m
    SET prev_id = l.prev_id, next_id = l.next_id, context_text = l.context_text
    FROM memory_sequence_links(targets) l
    WHERE m.id = l.id AND (m.prev_id IS DISTINCT FROM l.prev_id
        OR m.next_id IS DISTINCT FROM l.next_id OR m.context_text IS DISTINCT FROM l.context_text);
    -- A seed that left its sequence (forgotten, expired, no thread) holds no links.
    UPDATE memories_memory m SET prev_id = NULL, next_id = NULL, context_text = NULL
    WHERE m.id = ANY(seeds) AND NOT (m.status = 'active' AND m.thread_id IS NOT NULL)
      AND (m.prev_id IS NOT NULL OR m.next_id IS NOT NULL OR m.context_text IS NOT NULL);
END
$$;

CREATE OR REPLACE FUNCTION memory_sequence_lock() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.thread_id IS NOT NULL AND NEW.status = 'active' THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(
            concat_ws(':', 'seq', NEW.tenant_id, COALESCE(NEW.agent_id, 0), COALESCE(NEW.subject_id, ''), NEW.thread_id),
            0));
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION memory_sequence_on_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_sequence_refresh(ARRAY(
        SELECT id FROM new_rows WHERE thread_id IS NOT NULL AND status = 'active'));
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memory_sequence_on_update() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    seeds varchar[];
    keys text[];
BEGIN
    IF pg_trigger_depth() > 1 THEN  -- a refresh's own UPDATE
        RETURN NULL;
    END IF;
    WITH moved AS (
        SELECT n.id, o.prev_id, o.next_id,
               CASE WHEN n.thread_id IS NOT NULL
                    THEN concat_ws(':', 'seq', n.tenant_id, COALESCE(n.agent_id, 0), COALESCE(n.subject_id, ''), n.thread_id)
               END AS k,
               CASE WHEN o.thread_id IS NOT NULL
                    THEN concat_ws(':', 'seq', o.tenant_id, COALESCE(o.agent_id, 0), COALESCE(o.subject_id, ''), o.thread_id)
               END AS old_k
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        WHERE (n.thread_id IS NOT NULL OR o.thread_id IS NOT NULL)
          AND (n.text IS DISTINCT FROM o.text OR n.status IS DISTINCT FROM o.status
            OR n.thread_id IS DISTINCT FROM o.thread_id
            OR n.occurred_at IS DISTINCT FROM o.occurred_at
            OR n.created_at IS DISTINCT FROM o.created_at
            OR n.agent_id IS DISTINCT FROM o.agent_id
            OR n.subject_id IS DISTINCT FROM o.subject_id
            -- links written by anyone but a refresh (a stale copy saved back) are redone
            OR n.prev_id IS DISTINCT FROM o.prev_id OR n.next_id IS DISTINCT FROM o.next_id
            OR n.context_text IS DISTINCT FROM o.context_text)
    )
    SELECT ARRAY(SELECT t FROM (SELECT id AS t FROM moved UNION SELECT prev_id FROM moved
                                UNION SELECT next_id FROM moved) u WHERE t IS NOT NULL),
           ARRAY(SELECT k FROM (SELECT k FROM moved UNION SELECT old_k FROM moved) v
                 WHERE k IS NOT NULL ORDER BY k)
    INTO seeds, keys;
    IF cardinality(seeds) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest(keys) AS k;
    PERFORM memory_sequence_refresh(seeds);
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION memory_sequence_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM memory_sequence_refresh(ARRAY(
        SELECT t FROM (SELECT prev_id AS t FROM old_rows UNION SELECT next_id FROM old_rows) u
        WHERE t IS NOT NULL));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memory_sequence_lock BEFORE INSERT ON memories_memory
    FOR EACH ROW EXECUTE FUNCTION memory_sequence_lock();
CREATE OR REPLACE TRIGGER memory_sequence_insert AFTER INSERT ON memories_memory
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_insert();
CREATE OR REPLACE TRIGGER memory_sequence_update AFTER UPDATE ON memories_memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_update();
CREATE OR REPLACE TRIGGER memory_sequence_delete AFTER DELETE ON memories_memory
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_delete();

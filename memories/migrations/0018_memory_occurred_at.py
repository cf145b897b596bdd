"""`occurred_at` (docs/api.md#concepts), and sequences: the neighbours of a memory in its thread.

Memories of one owner, subject and `thread_id` form a sequence ordered by `occurred_at`, else
`created_at` (then id). Each live memory of a thread holds its neighbours' ids (`prev_id`,
`next_id`) and their texts (`context_text`), which the full-text document takes in at weight D
(the memory's own key and text at weight A), so a short reply is found by the words of the turn
it answers.

Triggers keep the links current on every write path (store, PATCH, corrections, forget,
restore, purge, thread end, eviction, the prune and retention jobs, import): after each
statement, the memories it inserted, deleted, or changed in a way that moves them in or out of
a sequence (text, status, thread, owner, subject, time) are refreshed together with their old
and new neighbours; a refresh's own UPDATE (a nested trigger) stops there, and links that any
other statement writes (a stale copy of a row saved back) are redone.
Writers into one sequence are serialised by a transaction advisory lock (`seq:…`), taken by an
insert before its row is written.
"""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
from django.db import migrations, models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce

SEQUENCE_KEY = (
    "concat_ws(':', 'seq', {t}.tenant_id, COALESCE({t}.agent_id, 0), "
    "COALESCE({t}.subject_id, ''), {t}.thread_id)"
)
LOCK = "pg_advisory_xact_lock(hashtextextended(" + SEQUENCE_KEY + ", 0))"
# Neighbour texts are capped: the context is a hint, not a second copy of a long memory.
CONTEXT_CHARS = 2000


def _neighbour(op: str, order: str) -> str:
    return f"""
        SELECT x.id, x.text FROM memories_memory x
        WHERE x.tenant_id = s.tenant_id AND COALESCE(x.agent_id, 0) = COALESCE(s.agent_id, 0)
          AND COALESCE(x.subject_id, '') = COALESCE(s.subject_id, '')
          AND x.thread_id = s.thread_id AND x.status = 'active'
          AND (COALESCE(x.occurred_at, x.created_at), x.id)
              {op} (COALESCE(s.occurred_at, s.created_at), s.id)
        ORDER BY COALESCE(x.occurred_at, x.created_at) {order}, x.id {order} LIMIT 1"""


FORWARD = f"""
CREATE OR REPLACE FUNCTION memory_sequence_links(ids varchar[])
RETURNS TABLE (id varchar, prev_id varchar, next_id varchar, context_text text)
LANGUAGE sql STABLE AS $$
    SELECT s.id, p.id, n.id,
           NULLIF(concat_ws(' ', left(p.text, {CONTEXT_CHARS}), left(n.text, {CONTEXT_CHARS})), '')
    FROM memories_memory s
    LEFT JOIN LATERAL ({_neighbour("<", "DESC")}) p ON true
    LEFT JOIN LATERAL ({_neighbour(">", "ASC")}) n ON true
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
        PERFORM {LOCK.format(t="NEW")};
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
               CASE WHEN n.thread_id IS NOT NULL THEN {SEQUENCE_KEY.format(t="n")} END AS k,
               CASE WHEN o.thread_id IS NOT NULL THEN {SEQUENCE_KEY.format(t="o")} END AS old_k
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

CREATE TRIGGER memory_sequence_lock BEFORE INSERT ON memories_memory
    FOR EACH ROW EXECUTE FUNCTION memory_sequence_lock();
CREATE TRIGGER memory_sequence_insert AFTER INSERT ON memories_memory
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_insert();
CREATE TRIGGER memory_sequence_update AFTER UPDATE ON memories_memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_update();
CREATE TRIGGER memory_sequence_delete AFTER DELETE ON memories_memory
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memory_sequence_on_delete();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS memory_sequence_lock ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_insert ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_update ON memories_memory;
DROP TRIGGER IF EXISTS memory_sequence_delete ON memories_memory;
DROP FUNCTION IF EXISTS memory_sequence_on_insert();
DROP FUNCTION IF EXISTS memory_sequence_on_update();
DROP FUNCTION IF EXISTS memory_sequence_on_delete();
DROP FUNCTION IF EXISTS memory_sequence_lock();
DROP FUNCTION IF EXISTS memory_sequence_refresh(varchar[]);
DROP FUNCTION IF EXISTS memory_sequence_links(varchar[]);
"""


class Migration(migrations.Migration):
    dependencies = [("memories", "0017_idempotency_key_digest_length")]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="occurred_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="prev_id",
            field=models.CharField(blank=True, max_length=30, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="next_id",
            field=models.CharField(blank=True, max_length=30, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="context_text",
            field=models.TextField(blank=True, null=True),
        ),
        # A generated column's expression cannot be altered: drop it (and its index), add anew.
        migrations.RemoveIndex(model_name="memory", name="memory_fts_idx"),
        migrations.RemoveField(model_name="memory", name="search_vector"),
        migrations.AddField(
            model_name="memory",
            name="search_vector",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.contrib.postgres.search.CombinedSearchVector(
                    django.contrib.postgres.search.SearchVector(
                        "key", "text", config="english", weight="A"
                    ),
                    "||",
                    django.contrib.postgres.search.SearchVector(
                        "context_text", config="english", weight="D"
                    ),
                    django.contrib.postgres.search.SearchConfig("english"),
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["tenant", "search_vector"], name="memory_fts_idx"
            ),
        ),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(
                F("tenant"),
                Coalesce("agent", Value(0)),
                Coalesce("subject_id", Value("")),
                F("thread_id"),
                Coalesce("occurred_at", "created_at"),
                F("id"),
                condition=Q(status="active") & Q(thread_id__isnull=False),
                name="memory_sequence_idx",
            ),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
        # Memories already in threads get their links (one refresh per sequence's members).
        migrations.RunSQL(
            "SELECT memory_sequence_refresh(ARRAY(SELECT id FROM memories_memory "
            "WHERE status = 'active' AND thread_id IS NOT NULL))",
            migrations.RunSQL.noop,
        ),
    ]

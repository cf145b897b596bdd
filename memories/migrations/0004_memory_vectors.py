"""Memories' embeddings move out of the memory row into a narrow table of their own
(`MemoryVector`), with the HNSW index, while the service keeps running.

1. The table: memory id, owner columns, model, vector (stored PLAIN: inline, uncompressed); its
   memory's deletion deletes it (ON DELETE CASCADE).
2. A trigger keeps it current with writes that still name the row's old `embedding` column (a
   node of the previous release, during a rolling upgrade); this release never writes that
   column, so the trigger's WHEN conditions keep it from running for its writes.
3. The vectors are copied in bounded batches, one transaction each, owner by owner (so a scope's
   vectors sit together on disk): nothing is locked for longer than a batch, and a copy that
   stops resumes where it was (a vector already copied is skipped).
4. Its indexes are built CONCURRENTLY (writes go on), then the memory table's HNSW index is
   dropped CONCURRENTLY.

The old column stays (NULL for every memory this release writes) until a later release drops
it, once no node of the previous release can run (docs/operations.md#upgrading).
"""

import django.db.models.deletion
import pgvector.django
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models, transaction

BATCH = 2000

MIRROR_SQL = """
CREATE OR REPLACE FUNCTION memory_vector_mirror() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.embedding IS NULL THEN
        DELETE FROM memories_memoryvector WHERE memory_id = NEW.id;
    ELSE
        INSERT INTO memories_memoryvector
            (memory_id, tenant_id, agent_id, subject_id, model, embedding)
        VALUES (NEW.id, NEW.tenant_id, NEW.agent_id, NEW.subject_id, NEW.embedding_model,
                NEW.embedding)
        ON CONFLICT (memory_id) DO UPDATE
            SET model = EXCLUDED.model, embedding = EXCLUDED.embedding;
    END IF;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS memory_vector_mirror_insert ON memories_memory;
CREATE TRIGGER memory_vector_mirror_insert AFTER INSERT ON memories_memory
    FOR EACH ROW WHEN (NEW.embedding IS NOT NULL) EXECUTE FUNCTION memory_vector_mirror();
DROP TRIGGER IF EXISTS memory_vector_mirror_update ON memories_memory;
-- (Compared as text: a restore runs this with an empty search_path, where pgvector's `=` is not
-- found, and its text form is exact.)
CREATE TRIGGER memory_vector_mirror_update AFTER UPDATE OF embedding ON memories_memory
    FOR EACH ROW WHEN (NEW.embedding::text IS DISTINCT FROM OLD.embedding::text)
    EXECUTE FUNCTION memory_vector_mirror();
"""

UNMIRROR_SQL = """
DROP TRIGGER IF EXISTS memory_vector_mirror_insert ON memories_memory;
DROP TRIGGER IF EXISTS memory_vector_mirror_update ON memories_memory;
DROP FUNCTION IF EXISTS memory_vector_mirror();
"""

# One batch of one owner's vectors, from `after` on, in id order; returns the last id read.
COPY_BATCH = """
WITH batch AS (
    SELECT id, tenant_id, agent_id, subject_id, embedding_model, embedding
    FROM memories_memory
    WHERE tenant_id = %s AND {agent} AND id > %s AND embedding IS NOT NULL
    ORDER BY id LIMIT %s
), copied AS (
    INSERT INTO memories_memoryvector (memory_id, tenant_id, agent_id, subject_id, model, embedding)
    SELECT id, tenant_id, agent_id, subject_id, embedding_model, embedding
    FROM batch ORDER BY subject_id NULLS FIRST, id
    ON CONFLICT (memory_id) DO NOTHING
)
SELECT max(id), count(*) FROM batch
"""


def copy_vectors(apps, schema_editor):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT DISTINCT tenant_id, agent_id FROM memories_memory "
            "WHERE embedding IS NOT NULL ORDER BY tenant_id, agent_id NULLS FIRST"
        )
        owners = cursor.fetchall()
    copied = 0
    for tenant_id, agent_id in owners:
        agent, owner = (
            ("agent_id IS NULL", []) if agent_id is None else ("agent_id = %s", [agent_id])
        )
        after = ""
        while True:
            with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
                cursor.execute(COPY_BATCH.format(agent=agent), [tenant_id, *owner, after, BATCH])
                last, count = cursor.fetchone()
            if not count:
                break
            copied += count
            after = last
    if copied and getattr(schema_editor, "verbosity", 1):
        print(f"\n  copied {copied} vectors into memories_memoryvector", flush=True)


class Migration(migrations.Migration):
    atomic = False  # each batch its own transaction; indexes built CONCURRENTLY

    dependencies = [
        ("accounts", "0001_baseline"),
        ("memories", "0003_run_leases"),
    ]

    operations = [
        # The table written out, not by CreateModel: the foreign key with ON DELETE CASCADE,
        # the vector stored PLAIN, and no pattern-matching (LIKE) index on its text key (Django
        # adds one for a text primary key; nothing matches memory ids by prefix, and each index
        # is one more to update per store).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="MemoryVector",
                    fields=[
                        (
                            "memory",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                primary_key=True,
                                related_name="vector",
                                serialize=False,
                                to="memories.memory",
                                db_constraint=False,
                            ),
                        ),
                        ("subject_id", models.CharField(blank=True, max_length=255, null=True)),
                        ("model", models.CharField(max_length=100)),
                        ("embedding", pgvector.django.VectorField(dimensions=384)),
                        (
                            "agent",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                to="accounts.agent",
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                to="accounts.tenant",
                            ),
                        ),
                    ],
                ),
            ],
            database_operations=[
                migrations.RunSQL(
                    [
                        "CREATE TABLE memories_memoryvector ("
                        "memory_id varchar(30) NOT NULL PRIMARY KEY "
                        "REFERENCES memories_memory (id) ON DELETE CASCADE, "
                        "tenant_id bigint NOT NULL, agent_id bigint NULL, "
                        "subject_id varchar(255) NULL, model varchar(100) NOT NULL, "
                        "embedding vector(384) NOT NULL)",
                        "ALTER TABLE memories_memoryvector ALTER COLUMN embedding SET STORAGE PLAIN",
                    ],
                    reverse_sql=["DROP TABLE memories_memoryvector"],
                ),
            ],
        ),
        migrations.RunSQL(MIRROR_SQL, reverse_sql=UNMIRROR_SQL),
        migrations.RunPython(copy_vectors, migrations.RunPython.noop, atomic=False),
        AddIndexConcurrently(
            model_name="memoryvector",
            index=models.Index(
                fields=["tenant", "agent", "subject_id"], name="memory_vector_owner_idx"
            ),
        ),
        AddIndexConcurrently(
            model_name="memoryvector",
            index=pgvector.django.HnswIndex(
                ef_construction=64,
                fields=["embedding"],
                m=16,
                name="memory_vector_hnsw",
                opclasses=["vector_cosine_ops"],
            ),
        ),
        # Statistics now, not at autovacuum's next pass: the exact scan's plan depends on them.
        migrations.RunSQL("ANALYZE memories_memoryvector", migrations.RunSQL.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(model_name="memory", name="memory_embedding_hnsw"),
                migrations.RemoveField(model_name="memory", name="embedding"),
            ],
            database_operations=[
                migrations.RunSQL(
                    "DROP INDEX CONCURRENTLY IF EXISTS memory_embedding_hnsw",
                    reverse_sql=migrations.RunSQL.noop,
                ),
            ],
        ),
    ]

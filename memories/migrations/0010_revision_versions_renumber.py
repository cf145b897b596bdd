from django.db import migrations

# Before 0011 makes (tenant, memory, version) unique: JSONL import used to write the file's
# version, so an older backup or a memory re-imported after retention repeated versions (1, 2,
# 3, 2, 3). In each history with a repeat, revisions are renumbered in id order so that each is
# at least its old version and above the one before: new = n + max(version - n) over the first
# n. Histories without a repeat are not touched. Snapshots keep saying the revision's version
# (`after`) and the one before it (`before`), and a memory behind its history moves up to it so
# that its next change gets a fresh version.
RENUMBER = """
WITH repeated AS (
    SELECT DISTINCT tenant_id, memory_id FROM memories_memoryrevision
    GROUP BY tenant_id, memory_id, version HAVING count(*) > 1
),
ranked AS (
    SELECT r.id, r.tenant_id, r.memory_id, r.version,
           row_number() OVER (PARTITION BY r.tenant_id, r.memory_id ORDER BY r.id) AS n
    FROM memories_memoryrevision r JOIN repeated USING (tenant_id, memory_id)
),
renumbered AS (
    SELECT id, tenant_id, memory_id,
           n + max(version - n) OVER (PARTITION BY tenant_id, memory_id ORDER BY id) AS version
    FROM ranked
),
numbered AS (
    SELECT id, version,
           lag(version) OVER (PARTITION BY tenant_id, memory_id ORDER BY id) AS previous
    FROM renumbered
),
revised AS (
    UPDATE memories_memoryrevision r SET
        version = v.version,
        after = CASE WHEN jsonb_typeof(r.after) = 'object' AND r.after ? 'version'
                     THEN jsonb_set(r.after, '{version}', to_jsonb(v.version)) ELSE r.after END,
        before = CASE WHEN v.previous IS NOT NULL AND jsonb_typeof(r.before) = 'object'
                           AND r.before ? 'version'
                      THEN jsonb_set(r.before, '{version}', to_jsonb(v.previous))
                      ELSE r.before END
    FROM numbered v
    WHERE r.id = v.id
    RETURNING r.tenant_id, r.memory_id, r.version
)
UPDATE memories_memory m SET version = h.latest
FROM (SELECT tenant_id, memory_id, max(version) AS latest FROM revised GROUP BY 1, 2) h
WHERE m.id = h.memory_id AND m.tenant_id = h.tenant_id AND m.version < h.latest
"""


def renumber(apps, schema_editor):
    schema_editor.execute(RENUMBER)


class Migration(migrations.Migration):
    dependencies = [("memories", "0009_tombstone_page_index")]

    operations = [migrations.RunPython(renumber, migrations.RunPython.noop)]

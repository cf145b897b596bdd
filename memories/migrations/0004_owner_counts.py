"""Per-owner count of active memories, kept exact by statement-level triggers.

The store-time entry-cap check reads one `memories_ownercount` row instead of counting an
agent's memories on every store. Statement triggers with transition tables aggregate once per
statement, so bulk loads and batched jobs pay one upsert per owner and statement; an UPDATE
that changes no status (a read bumping `last_accessed_at`) writes nothing. Upserts run in
(tenant, owner) order so concurrent batches take the counter rows' locks in one order.
"""

from django.db import migrations, models

DELTA_UPSERT = """
    INSERT INTO memories_ownercount (tenant_id, owner_id, active)
    SELECT tenant_id, owner_id, sum(delta) FROM ({deltas}) d
    GROUP BY tenant_id, owner_id
    HAVING sum(delta) <> 0
    ORDER BY tenant_id, owner_id
    ON CONFLICT (tenant_id, owner_id)
    DO UPDATE SET active = memories_ownercount.active + EXCLUDED.active;
"""
NEW_ROWS = "SELECT tenant_id, COALESCE(agent_id, 0) AS owner_id, 1 AS delta FROM new_rows WHERE status = 'active'"
OLD_ROWS = "SELECT tenant_id, COALESCE(agent_id, 0) AS owner_id, -1 AS delta FROM old_rows WHERE status = 'active'"


def _function(name: str, deltas: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{DELTA_UPSERT.format(deltas=deltas)}
    RETURN NULL;
END
$$;
"""


FORWARD = (
    _function("memories_ownercount_on_insert", NEW_ROWS)
    + _function("memories_ownercount_on_update", f"{NEW_ROWS} UNION ALL {OLD_ROWS}")
    + _function("memories_ownercount_on_delete", OLD_ROWS)
    + """
CREATE TRIGGER memories_ownercount_insert AFTER INSERT ON memories_memory
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_insert();
CREATE TRIGGER memories_ownercount_update AFTER UPDATE ON memories_memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_update();
CREATE TRIGGER memories_ownercount_delete AFTER DELETE ON memories_memory
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION memories_ownercount_on_delete();
"""
)

BACKWARD = """
DROP TRIGGER IF EXISTS memories_ownercount_insert ON memories_memory;
DROP TRIGGER IF EXISTS memories_ownercount_update ON memories_memory;
DROP TRIGGER IF EXISTS memories_ownercount_delete ON memories_memory;
DROP FUNCTION IF EXISTS memories_ownercount_on_insert();
DROP FUNCTION IF EXISTS memories_ownercount_on_update();
DROP FUNCTION IF EXISTS memories_ownercount_on_delete();
"""

# Count what exists already (taken together with the triggers, inside this migration's
# transaction, so no write slips between the count and the first trigger).
BACKFILL = """
LOCK TABLE memories_memory IN SHARE ROW EXCLUSIVE MODE;
DELETE FROM memories_ownercount;
INSERT INTO memories_ownercount (tenant_id, owner_id, active)
SELECT tenant_id, COALESCE(agent_id, 0), count(*)
FROM memories_memory WHERE status = 'active'
GROUP BY tenant_id, COALESCE(agent_id, 0);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0003_job_schedules"),
    ]

    operations = [
        migrations.CreateModel(
            name="OwnerCount",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("tenant_id", models.BigIntegerField()),
                ("owner_id", models.BigIntegerField()),
                ("active", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant_id", "owner_id"), name="ownercount_owner_uniq"
                    )
                ],
            },
        ),
        migrations.RunSQL(BACKFILL + FORWARD, reverse_sql=BACKWARD),
    ]

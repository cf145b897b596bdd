"""Caps of user memories per subject: `memories_ownercount` gains a subject, and its
triggers (migration 0004) count a user memory under (tenant, -1, subject) instead of under its
tenant's workspace (both have no agent). Every existing memory is agent-scoped: the counts stay
as they are."""

from django.db import migrations, models

DELTA_UPSERT = """
    INSERT INTO memories_ownercount (tenant_id, owner_id, subject_id, active)
    SELECT tenant_id, owner_id, subject_id, sum(delta) FROM ({deltas}) d
    GROUP BY tenant_id, owner_id, subject_id
    HAVING sum(delta) <> 0
    ORDER BY tenant_id, owner_id, subject_id
    ON CONFLICT (tenant_id, owner_id, subject_id)
    DO UPDATE SET active = memories_ownercount.active + EXCLUDED.active;
"""
OWNER = (
    "tenant_id, CASE WHEN scope = 'user' THEN -1 ELSE COALESCE(agent_id, 0) END AS owner_id, "
    "CASE WHEN scope = 'user' THEN subject_id ELSE '' END AS subject_id"
)
NEW_ROWS = f"SELECT {OWNER}, 1 AS delta FROM new_rows WHERE status = 'active'"
OLD_ROWS = f"SELECT {OWNER}, -1 AS delta FROM old_rows WHERE status = 'active'"

OLD_UPSERT = DELTA_UPSERT.replace(", subject_id", "").replace(" subject_id,", "")
OLD_OWNER = "tenant_id, COALESCE(agent_id, 0) AS owner_id"
OLD_NEW_ROWS = f"SELECT {OLD_OWNER}, 1 AS delta FROM new_rows WHERE status = 'active'"
OLD_OLD_ROWS = f"SELECT {OLD_OWNER}, -1 AS delta FROM old_rows WHERE status = 'active'"


def _function(name: str, upsert: str, deltas: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{upsert.format(deltas=deltas)}
    RETURN NULL;
END
$$;
"""


def _functions(upsert: str, new_rows: str, old_rows: str) -> str:
    return (
        _function("memories_ownercount_on_insert", upsert, new_rows)
        + _function("memories_ownercount_on_update", upsert, f"{new_rows} UNION ALL {old_rows}")
        + _function("memories_ownercount_on_delete", upsert, old_rows)
    )


FORWARD = _functions(DELTA_UPSERT, NEW_ROWS, OLD_ROWS)
BACKWARD = _functions(OLD_UPSERT, OLD_NEW_ROWS, OLD_OLD_ROWS)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0080_memory_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="ownercount",
            name="subject_id",
            field=models.CharField(blank=True, default="", max_length=255),
        ),
        migrations.RemoveConstraint(model_name="ownercount", name="ownercount_owner_uniq"),
        migrations.AddConstraint(
            model_name="ownercount",
            constraint=models.UniqueConstraint(
                fields=("tenant_id", "owner_id", "subject_id"), name="ownercount_owner_uniq"
            ),
        ),
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
    ]

"""Every tenant starts with the built-in kinds: written here for the tenants that
exist, and by a trigger on `accounts_tenant` for every tenant created from now on, whoever
creates it (a command, the console, the admin site, a test factory).

The definitions are frozen here, as a migration's must be; tests/memories/test_kinds.py holds a
new tenant's rows equal to `memories.kind_registry.BUILTIN_KINDS`, so a change there needs a migration
that replaces this trigger's function."""

import json

from django.db import migrations

BUILTINS = [
    {
        "name": "fact",
        "cardinality": "multiple",
        "memory_type": "semantic",
        "description": "One distilled fact, a sentence or two (the default kind).",
        "schema": None,
        "default_category": None,
    },
    {
        "name": "UserProfile",
        "cardinality": "single",
        "memory_type": "semantic",
        "description": (
            "Who the user is: one profile per user, replaced as a whole when it changes. "
            "Put the fields in `data` (name, preferred language, timezone, location, any other)."
        ),
        "schema": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "preferredLanguage": {"type": "string"},
                "timezone": {"type": "string"},
                "location": {"type": "string"},
            },
            "additionalProperties": True,
        },
        "default_category": "core",
    },
    {
        "name": "AgentInstructions",
        "cardinality": "single",
        "memory_type": "procedural",
        "description": (
            "Standing instructions for the agent (how to behave, what to avoid): one record, "
            "replaced as a whole when they change."
        ),
        "schema": None,
        "default_category": "core",
    },
    {
        "name": "InteractionLog",
        "cardinality": "multiple",
        "memory_type": "episodic",
        "description": "What happened in one interaction: an episode, appended.",
        "schema": None,
        "default_category": "daily",
    },
]


def _literal(value) -> str:
    if value is None:
        return "NULL"
    return "'" + str(value).replace("'", "''") + "'"


def _values() -> str:
    rows = []
    for kind in BUILTINS:
        schema = None if kind["schema"] is None else json.dumps(kind["schema"])
        rows.append(
            "("
            + ", ".join(
                [
                    _literal(kind["name"]),
                    _literal(kind["cardinality"]),
                    _literal(kind["memory_type"]),
                    _literal(kind["description"]),
                    f"{_literal(schema)}::jsonb",
                    f"{_literal(kind['default_category'])}::varchar",
                ]
            )
            + ")"
        )
    return ",\n        ".join(rows)


INSERT_FOR = """
    INSERT INTO memories_kind (tenant_id, name, cardinality, memory_type, description, schema,
                               default_category, created_at, updated_at)
    SELECT {tenant}, v.name, v.cardinality, v.memory_type, v.description, v.schema,
           v.default_category, now(), now()
    FROM (VALUES
        {values}
    ) AS v(name, cardinality, memory_type, description, schema, default_category)
    ON CONFLICT (tenant_id, name) DO NOTHING;
"""

FORWARD = f"""
CREATE OR REPLACE FUNCTION memories_kind_builtins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{INSERT_FOR.format(tenant="NEW.id", values=_values())}
    RETURN NULL;
END
$$;
CREATE TRIGGER memories_kind_builtins AFTER INSERT ON accounts_tenant
    FOR EACH ROW EXECUTE FUNCTION memories_kind_builtins();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS memories_kind_builtins ON accounts_tenant;
DROP FUNCTION IF EXISTS memories_kind_builtins();
"""

EXISTING = INSERT_FOR.format(tenant="t.id", values=_values()).replace(
    "FROM (VALUES", "FROM accounts_tenant t CROSS JOIN (VALUES"
)


def builtins_for_existing_tenants(apps, schema_editor):
    schema_editor.execute(EXISTING)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0082_kind_registry"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, reverse_sql=BACKWARD),
        migrations.RunPython(builtins_for_existing_tenants, migrations.RunPython.noop),
    ]

-- Every tenant starts with the built-in kinds, written by a trigger on accounts_tenant for
-- every tenant created, whoever creates it (a command, the console, the admin site, a test
-- factory). tests/memories/test_kinds.py holds a new tenant's rows equal to
-- memories.kind_registry.BUILTIN_KINDS: a change there changes this function too, with a
-- migration that runs this file again and writes the change into existing tenants.

CREATE OR REPLACE FUNCTION memories_kind_builtins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO memories_kind (tenant_id, name, cardinality, memory_type, description, schema,
                               default_category, created_at, updated_at)
    SELECT NEW.id, v.name, v.cardinality, v.memory_type, v.description, v.schema,
           v.default_category, now(), now()
    FROM (VALUES
        ('fact', 'multiple', 'semantic',
         'One distilled fact, a sentence or two (the default kind).',
         NULL::jsonb, NULL::varchar),
        ('UserProfile', 'single', 'semantic',
         'Who the user is: one profile per user, replaced as a whole when it changes. Put the fields in `data` (name, preferred language, timezone, location, any other).',
         '{"type": "object", "properties": {"name": {"type": "string"}, "preferredLanguage": {"type": "string"}, "timezone": {"type": "string"}, "location": {"type": "string"}}, "additionalProperties": true}'::jsonb,
         'core'::varchar),
        ('AgentInstructions', 'single', 'procedural',
         'Standing instructions for the agent (how to behave, what to avoid): one record, replaced as a whole when they change.',
         NULL::jsonb, 'core'::varchar),
        ('InteractionLog', 'multiple', 'episodic',
         'What happened in one interaction: an episode, appended.',
         NULL::jsonb, 'daily'::varchar)
    ) AS v(name, cardinality, memory_type, description, schema, default_category)
    ON CONFLICT (tenant_id, name) DO NOTHING;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER memories_kind_builtins AFTER INSERT ON accounts_tenant
    FOR EACH ROW EXECUTE FUNCTION memories_kind_builtins();

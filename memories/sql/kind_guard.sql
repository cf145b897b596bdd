-- memory_kind_guard(tenant, lock) (memories.kind_registry.kind_guard): a write holds a kind's
-- advisory lock shared, then reads the tenant's kinds_version, in one round trip. A function,
-- because a volatile function's query takes its own snapshot after the lock is granted, and
-- sees a registry change that committed while the write waited for it.

CREATE OR REPLACE FUNCTION memory_kind_guard(tenant bigint, lock_key bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    version bigint;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(lock_key);
    SELECT kinds_version INTO version FROM accounts_tenant WHERE id = tenant;
    RETURN version;
END
$$;

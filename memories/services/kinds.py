"""Changes to a tenant's kind registry (SPEC §13.1): define or redefine a kind, delete one.

REST (`PUT`/`DELETE /api/v1/kinds/{name}`, admin scope) and the console's Kinds page (admin role)
call these. A change holds the kind's lock exclusively (`kinds.kind_lock_name`; every write of a
memory of that kind holds it shared, `kinds.kind_guard`), so the memories it checks are all
there is: none is written meanwhile against the registry it replaces.

- A schema that the stored data of the kind's live memories no longer satisfies (they satisfied
  the old one, or the kind was a free label) is refused: CONFLICT naming the first offending
  memories. Data that failed the old schema already (stored before it existed) does not block.
- `multiple` → `single` is refused while an owner and subject have several live memories of the
  kind (CONFLICT naming them); otherwise their `kind_single` is set, and cleared for the other
  way round. That column is what the partial unique index reads, not a change of the memory
  (no version, no revision).
- A kind with live memories cannot be deleted (CONFLICT with their `count`).

Every change bumps the tenant's `kinds_version` (a process's cached registry is then stale) and
sends `NOTIFY memoryhub_kinds, '<tenant id>'` at commit, which the MCP server turns into
`notifications/tools/list_changed` for that tenant's listeners.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, QuerySet
from jsonschema import Draft202012Validator

from accounts.models import Tenant
from memories import kinds
from memories.clock import resolve_now
from memories.models import Cardinality, Kind, Memory, MemoryType, Status
from memories.secrets_scan import scan_secrets
from memories.services.common import advisory_lock
from memories.validation import CATEGORY_RE, reject_unknown, require_object
from memoryhub.errors import Conflict, InvalidInput, NotFound

KIND_FIELDS = frozenset({"cardinality", "memory_type", "description", "schema", "default_category"})
MAX_DESCRIPTION_CHARS = 2000
OFFENDING_IDS = 10  # memory ids a refusal names
NOTIFY_CHANNEL = "memoryhub_kinds"


def kind_name(value: Any) -> str:
    if not isinstance(value, str) or not kinds.KIND_NAME_RE.match(value):
        raise InvalidInput(
            "A kind's name is a letter, then letters, digits or _ (at most 60): e.g. UserProfile",
            field="name",
        )
    return value


def parse_kind(data: Any) -> dict[str, Any]:
    """A kind's definition (the PUT body, the console's form), validated: every field is
    optional and defaults as a new kind's would (a PUT replaces the whole definition)."""
    data = require_object(data)
    scan_secrets({"description": data.get("description"), "schema": data.get("schema")})
    reject_unknown(data, KIND_FIELDS)
    cardinality = data.get("cardinality") or Cardinality.MULTIPLE
    if cardinality not in Cardinality.values:
        raise InvalidInput("'cardinality' must be single or multiple", field="cardinality")
    memory_type = data.get("memory_type") or MemoryType.SEMANTIC
    if memory_type not in MemoryType.values:
        raise InvalidInput(
            "'memory_type' must be semantic, episodic or procedural", field="memory_type"
        )
    description = data.get("description") or ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidInput(
            f"'description' must be a string of at most {MAX_DESCRIPTION_CHARS} characters",
            field="description",
        )
    schema = data.get("schema")
    if schema is not None and len(json.dumps(schema)) > kinds.MAX_SCHEMA_BYTES:
        raise InvalidInput(
            f"'schema' is larger than {kinds.MAX_SCHEMA_BYTES} bytes", field="schema"
        )
    kinds.check_schema(schema)
    category = data.get("default_category")
    if category is not None and (not isinstance(category, str) or not CATEGORY_RE.match(category)):
        raise InvalidInput(
            "'default_category' must match [a-z0-9_-]{1,40}", field="default_category"
        )
    return {
        "cardinality": cardinality,
        "memory_type": memory_type,
        "description": description.strip(),
        "schema": schema,
        "default_category": category or None,
    }


def kind_get(*, tenant: Tenant, name: str) -> Kind:
    kind = Kind.objects.for_tenant(tenant).filter(name=name).first()
    if kind is None:
        raise NotFound("No such kind")
    return kind


def kind_counts(*, tenant: Tenant) -> dict[str, int]:
    """Live memories by kind (the Kinds page): one grouping over `memory_live_kind_idx`."""
    return dict(
        Memory.objects.for_tenant(tenant)
        .filter(status=Status.ACTIVE)
        .values("kind")
        .order_by("kind")
        .annotate(n=Count("id"))
        .values_list("kind", "n")
    )


def kind_save(
    *, tenant: Tenant, name: str, data: Any, now: datetime | None = None
) -> tuple[Kind, bool]:
    """Define `name` for the tenant, or redefine it (SPEC §13.1: PUT). Returns the kind and
    whether it was created. CONFLICT when live memories of the kind would break the new
    definition (see the module docstring)."""
    now = resolve_now(now)
    scan_secrets({"kind": name})
    name = kind_name(name)
    definition = parse_kind(data)
    with transaction.atomic():
        _lock(tenant, name)
        current = Kind.objects.for_tenant(tenant).select_for_update().filter(name=name).first()
        _check_tool_name(tenant, name)
        rows = Memory.objects.for_tenant(tenant).filter(kind=name, status=Status.ACTIVE)
        old_schema = current.schema if current is not None else None
        if definition["schema"] is not None and definition["schema"] != old_schema:
            _check_stored_data(rows, definition["schema"], old_schema, name)
        single = definition["cardinality"] == Cardinality.SINGLE
        was_single = current is not None and current.single
        if single and not was_single:
            _check_one_per_owner(rows, name)
        if single != was_single:
            rows.exclude(kind_single=single).update(kind_single=single)
        created = current is None
        kind = current or Kind(tenant=tenant, name=name, created_at=now)
        for field, value in definition.items():
            setattr(kind, field, value)
        kind.updated_at = now
        kind.save()
        _changed(tenant)
    return kind, created


def kind_delete(*, tenant: Tenant, name: str) -> None:
    """Delete a kind (its name becomes a free label); CONFLICT while live memories use it."""
    with transaction.atomic():
        _lock(tenant, name)
        kind = Kind.objects.for_tenant(tenant).select_for_update().filter(name=name).first()
        if kind is None:
            raise NotFound("No such kind")
        count = Memory.objects.for_tenant(tenant).filter(kind=name, status=Status.ACTIVE).count()
        if count:
            raise Conflict(
                f"The kind '{name}' is used by {count} live memories", details={"count": count}
            )
        kind.delete()
        _changed(tenant)


def _lock(tenant: Tenant, name: str) -> None:
    """The kind's lock, exclusively: every write of a memory of this kind holds it shared."""
    advisory_lock(kinds.kind_lock_name(tenant.pk, name))


def _check_tool_name(tenant: Tenant, name: str) -> None:
    """Two kinds must not share an MCP tool (`UserProfile` and `user_profile` would)."""
    tool = kinds.tool_name(name)
    for other in Kind.objects.for_tenant(tenant).exclude(name=name).values_list("name", flat=True):
        if kinds.tool_name(other) == tool:
            raise InvalidInput(
                f"The kind '{other}' has the MCP tool {tool} already; choose another name",
                field="name",
            )


def _check_stored_data(
    rows: QuerySet[Memory], schema: dict[str, Any], old_schema: dict[str, Any] | None, name: str
) -> None:
    """CONFLICT when live memories of the kind satisfied the old definition (or none) and fail
    `schema`."""
    new = Draft202012Validator(schema)
    old = Draft202012Validator(old_schema) if old_schema is not None else None
    offending: list[str] = []
    first_errors: list[dict[str, Any]] = []
    for memory_id, data in rows.order_by("id").values_list("id", "data").iterator(2000):
        errors = kinds.data_errors(new, data)
        if errors and (old is None or not kinds.data_errors(old, data)):
            offending.append(memory_id)
            first_errors = first_errors or errors
            if len(offending) >= OFFENDING_IDS:
                break
    if offending:
        raise Conflict(
            f"Stored memories of '{name}' do not satisfy the new schema",
            details={"memory_ids": offending, "errors": first_errors},
        )


def _check_one_per_owner(rows: QuerySet[Memory], name: str) -> None:
    """CONFLICT when an owner and subject have several live memories of the kind."""
    with connection.cursor() as cursor:
        sql, params = rows.values("id").query.sql_with_params()
        cursor.execute(
            "SELECT array_agg(m.id ORDER BY m.updated_at DESC, m.id) "
            f"FROM {Memory._meta.db_table} m WHERE m.id IN ({sql}) "
            "GROUP BY m.agent_id, m.scope, m.subject_id HAVING count(*) > 1 "
            "ORDER BY min(m.id) LIMIT %s",
            [*params, OFFENDING_IDS],
        )
        groups = [ids for (ids,) in cursor.fetchall()]
    if groups:
        ids = [memory_id for group in groups for memory_id in group][:OFFENDING_IDS]
        raise Conflict(
            f"Owners have several live memories of '{name}'; a single kind allows one each",
            details={"memory_ids": ids},
        )


def _changed(tenant: Tenant) -> None:
    """The registry changed: a new version for the caches, a notification at commit."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Tenant._meta.db_table} SET kinds_version = kinds_version + 1 "
            "WHERE id = %s RETURNING kinds_version",
            [tenant.pk],
        )
        tenant.kinds_version = cursor.fetchone()[0]
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, str(tenant.pk)])

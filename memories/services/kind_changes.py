"""Changes to a tenant's kind registry: define or redefine a kind, delete one.

REST (`PUT`/`DELETE /api/v1/kinds/{name}`, admin scope) and the console's Kinds page (admin role)
call these. A change holds the kind's lock exclusively (`kind_registry.kind_lock_name`; every write of a
memory of that kind holds it shared, `kind_registry.kind_guard`), so the memories it checks are all
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

import logging
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, QuerySet

from accounts.models import Tenant
from memories import kind_checks, kind_registry
from memories.clock import resolve_now
from memories.models import Cardinality, Kind, Memory, MemoryType, Status
from memories.secrets_scan import scan_secrets
from memories.services.write_support import advisory_lock
from memories.validation import CATEGORY_RE, reject_unknown, require_object
from memoryhub.errors import Conflict, InvalidInput, NotFound

KIND_FIELDS = frozenset({"cardinality", "memory_type", "description", "schema", "default_category"})
MAX_DESCRIPTION_CHARS = 2000
OFFENDING_IDS = 10  # memory ids a refusal names
NOTIFY_CHANNEL = "memoryhub_kinds"
RECHECK_BATCH = 1000  # stored memories read and checked at a time when a schema changes

logger = logging.getLogger(__name__)


def kind_name(value: Any) -> str:
    if not isinstance(value, str) or not kind_registry.KIND_NAME_RE.match(value):
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
    kind_registry.check_schema(schema)
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
    """Define `name` for the tenant, or redefine it (PUT). Returns the kind and
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
    advisory_lock(kind_registry.kind_lock_name(tenant.pk, name))


def _check_tool_name(tenant: Tenant, name: str) -> None:
    """Two kinds must not share an MCP tool (`UserProfile` and `user_profile` would)."""
    tool = kind_registry.tool_name(name)
    for other in Kind.objects.for_tenant(tenant).exclude(name=name).values_list("name", flat=True):
        if kind_registry.tool_name(other) == tool:
            raise InvalidInput(
                f"The kind '{other}' has the MCP tool {tool} already; choose another name",
                field="name",
            )


def _check_stored_data(
    rows: QuerySet[Memory], schema: dict[str, Any], old_schema: dict[str, Any] | None, name: str
) -> None:
    """CONFLICT when live memories of the kind satisfied the old definition (or none) and fail
    `schema`.

    Runs under the kind's lock (stores of this kind wait; reads, and writes of other kinds, do
    not): in batches of `RECHECK_BATCH` by id (one short query each, no cursor held open), each
    memory's check under the budget of one check, a log line per batch, and the whole bounded by
    `settings.MEMORYHUB_KIND_RECHECK_SECONDS` (refused past it: the lock is not held longer).
    A memory whose check under the new schema runs past its budget offends like a failing one
    (its next store would be refused); one past the budget under the old schema counts as
    failing it already."""
    new = kind_checks.validator_for(schema)
    old = kind_checks.validator_for(old_schema) if old_schema is not None else None
    total = rows.count()
    limit = settings.MEMORYHUB_KIND_RECHECK_SECONDS
    deadline = time.monotonic() + limit
    offending: list[str] = []
    first_errors: list[dict[str, Any]] = []
    done, after = 0, ""
    while done < total and len(offending) < OFFENDING_IDS:
        batch = list(
            rows.filter(id__gt=after).order_by("id").values_list("id", "data")[:RECHECK_BATCH]
        )
        if not batch:
            break
        for memory_id, data in batch:
            errors = _stored_errors(new, data)
            if errors and (old is None or not _stored_errors(old, data)):
                offending.append(memory_id)
                first_errors = first_errors or errors
                if len(offending) >= OFFENDING_IDS:
                    break
        done += len(batch)
        after = batch[-1][0]
        logger.info("kind %s: stored data checked against the new schema, %d/%d", name, done, total)
        if time.monotonic() > deadline and done < total and len(offending) < OFFENDING_IDS:
            raise InvalidInput(
                f"Checking the {total} stored memories of '{name}' against the new schema "
                f"takes longer than {limit} s (checked {done}); simplify the schema",
                field="schema",
                details={"checked": done, "total": total, "limit_seconds": limit},
            )
    if offending:
        raise Conflict(
            f"Stored memories of '{name}' do not satisfy the new schema",
            details={"memory_ids": offending, "errors": first_errors},
        )


def _stored_errors(validator: Any, data: Any) -> list[dict[str, Any]]:
    """A stored memory's errors under `validator`: a check past its budget, or one the
    validator cannot run, is an error like any other."""
    try:
        return kind_registry.data_errors(validator, data)
    except kind_checks.CheckTooCostly:
        return [{"path": "", "message": kind_checks.budget_message()}]
    except kind_registry.SchemaUnusable as exc:
        return [{"path": "", "message": f"the schema cannot be evaluated ({exc})"}]


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

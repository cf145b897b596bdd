"""The kind registry: what a kind is, the built-in ones, a tenant's registry as a
store reads it, and the JSON Schema rules (a kind's schema checked on registration, a memory's
`data` checked against it on every write).

A store, a PATCH, a console correction and a JSONL import all ask `kind_rule(registry, name)`
what a kind requires; none reads the `Kind` table itself. A tenant's registry is cached per
process under (tenant, `kinds_version`): the version comes with the tenant's row, which every
request has already loaded (with the API key, or the operator's membership), so a store reads
no extra row for it. `kind_guard` closes the race with a concurrent registry change: the write
holds the kind's lock shared while the change holds it exclusively.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from jsonschema import Draft202012Validator

from accounts.models import Tenant
from memories import kind_checks, kind_schema_rules
from memories.horizon import ANNOUNCE, Announcement
from memories.models import Cardinality, Category, Kind, MemoryType
from memoryhub.errors import InvalidInput

KIND_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,59}\Z")  # \Z: `$` admits a final "\n"
DEFAULT_KIND = "fact"
MAX_SCHEMA_BYTES = 65_536
MAX_DATA_ERRORS = 20  # `details.errors` of one refused write
MAX_ERROR_MESSAGE = 300
MAX_COLLECTED_ERRORS = 1_000  # a check stops collecting errors past this many

logger = logging.getLogger(__name__)

# Every tenant starts with these, written by the trigger of memories/sql/builtin_kinds.sql for
# every tenant created (tests/memories/test_kinds.py holds the trigger's rows equal to this list).
BUILTIN_KINDS: tuple[dict[str, Any], ...] = (
    {
        "name": "fact",
        "cardinality": Cardinality.MULTIPLE.value,
        "memory_type": MemoryType.SEMANTIC.value,
        "description": "One distilled fact, a sentence or two (the default kind).",
        "schema": None,
        "default_category": None,
    },
    {
        "name": "UserProfile",
        "cardinality": Cardinality.SINGLE.value,
        "memory_type": MemoryType.SEMANTIC.value,
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
        "default_category": Category.CORE,
    },
    {
        "name": "AgentInstructions",
        "cardinality": Cardinality.SINGLE.value,
        "memory_type": MemoryType.PROCEDURAL.value,
        "description": (
            "Standing instructions for the agent (how to behave, what to avoid): one record, "
            "replaced as a whole when they change."
        ),
        "schema": None,
        "default_category": Category.CORE,
    },
    {
        "name": "InteractionLog",
        "cardinality": Cardinality.MULTIPLE.value,
        "memory_type": MemoryType.EPISODIC.value,
        "description": "What happened in one interaction: an episode, appended.",
        "schema": None,
        "default_category": Category.DAILY,
    },
)


def tool_name(kind: str) -> str:
    """The MCP tool of a kind: `create_<snake_case name>` (`UserProfile` → create_user_profile)."""
    snake = re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z])(?=[a-z])", r"_\1\2", kind)
    return f"create_{re.sub(r'_+', '_', snake).lower()}"


# --- a tenant's registry -------------------------------------------------------------------------


@dataclass(frozen=True)
class KindRule:
    """What a store of one kind must do: check `data` against `schema` (a validator), keep one
    live record per owner and subject (`single`), and file it under `default_category` when the
    store names no category. A free label gets `FREE_LABEL`."""

    name: str
    single: bool
    validator: Draft202012Validator | None
    default_category: str | None
    registered: bool


FREE_LABEL = KindRule(
    name="", single=False, validator=None, default_category=None, registered=False
)


@dataclass(frozen=True)
class Registry:
    """A tenant's kinds at one `kinds_version`."""

    version: int
    kinds: tuple[Kind, ...]
    rules: dict[str, KindRule]

    def rule(self, name: str) -> KindRule:
        return self.rules.get(name, FREE_LABEL)


_CACHE: OrderedDict[tuple[int, int], Registry] = OrderedDict()
_CACHE_SIZE = 512
_LOCK = threading.Lock()


def registry(tenant: Tenant) -> Registry:
    """The tenant's registry at the version its row carries (one query when not cached)."""
    key = (tenant.pk, tenant.kinds_version)
    with _LOCK:
        found = _CACHE.get(key)
        if found is not None:
            _CACHE.move_to_end(key)
            return found
    kinds = tuple(Kind.objects.for_tenant(tenant).order_by("name"))
    built = Registry(
        version=tenant.kinds_version,
        kinds=kinds,
        rules={
            kind.name: KindRule(
                name=kind.name,
                single=kind.single,
                validator=None if kind.schema is None else kind_checks.validator_for(kind.schema),
                default_category=kind.default_category,
                registered=True,
            )
            for kind in kinds
        },
    )
    with _LOCK:
        _CACHE[key] = built
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return built


def kind_lock_name(tenant_id: int, kind: str) -> str:
    return f"kind:{tenant_id}:{kind}"


def kind_guard(
    tenant: Tenant,
    kind: str,
    *,
    then_lock: str | None = None,
    announce: Announcement | None = None,
) -> Registry:
    """Inside a write's transaction: hold `kind`'s lock shared (a registry change holds it
    exclusively) and return the registry as it is now. One statement: a function that takes
    the lock and then reads the tenant's `kinds_version` (a volatile function's query sees what
    committed while it waited; the statement's own snapshot would not).

    `announce`: the write's announcement (`horizon.announcement`), made by the same statement
    once it holds the kind's lock. `then_lock`: the name of a transaction-level advisory lock
    the same statement takes last (a store's cap lock, `eviction.cap_lock_name`). Each is one
    round trip less."""
    return kind_guard_sent(tenant, kind, then_lock=then_lock, announce=announce)()


def kind_guard_sent(
    tenant: Tenant,
    kind: str,
    *,
    then_lock: str | None = None,
    announce: Announcement | None = None,
    generic_plans: bool = False,
) -> Callable[[], Registry]:
    """`kind_guard`'s statement executed, and what reads its answer: called after a pipeline's
    end (`memoryhub.pipeline`), the statement rode with others. `generic_plans`: the rest of
    the transaction runs its prepared statements' generic plans (a store's: its look-alike
    statement cost more to plan than to run, and `plan_cache_mode=auto` could pick its custom
    plans for estimates a little lower)."""
    # Both in the target list: evaluated for the function's row, so after the kind's lock, in
    # their order.
    columns: list[str] = ["v"]
    params: list[Any] = []
    if announce is not None:
        columns.append(ANNOUNCE)
        params += announce.params
    if then_lock is not None:
        columns.append("pg_advisory_xact_lock(hashtextextended(%s, 0))")
        params.append(then_lock)
    if generic_plans and connection.settings_dict["OPTIONS"].get("prepare_threshold") is not None:
        columns.append("set_config('plan_cache_mode', 'force_generic_plan', true)")
    cursor = connection.cursor()
    cursor.execute(
        f"SELECT {', '.join(columns)} FROM memory_kind_guard(%s, hashtextextended(%s, 0)) AS v",
        [*params, tenant.pk, kind_lock_name(tenant.pk, kind)],
    )

    def answer() -> Registry:
        with cursor:
            version = cursor.fetchone()[0]
        if version != tenant.kinds_version:
            tenant.kinds_version = version
        return registry(tenant)

    return answer


# --- JSON Schema -------------------------------------------------------------------------------


def _pointer(parts) -> str:
    """A JSON pointer (RFC 6901) of a path: `/favoriteColor`, `/items/0`; '' for the root."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts)


def _message(text: str) -> str:
    return text if len(text) <= MAX_ERROR_MESSAGE else text[: MAX_ERROR_MESSAGE - 1] + "…"


def data_errors(validator: Draft202012Validator, data: Any) -> list[dict[str, str]]:
    """Where `data` fails the schema: `[{"path": "/favoriteColor", "message": …}]`, in path
    order, at most `MAX_DATA_ERRORS`. A missing required property is named in its path.

    The check runs under its budget (`kind_checks.budget`): over it, `CheckTooCostly`. Any
    other failure of the validator itself (a schema stored before today's checks existed) is
    `SchemaUnusable`; neither is ever a 500."""
    errors = []
    try:
        with kind_checks.budget():
            for error in validator.iter_errors(data if data is not None else {}):
                parts = list(error.absolute_path)
                if error.validator == "required" and isinstance(error.instance, dict):
                    missing = [name for name in error.validator_value if name not in error.instance]
                    named = next((name for name in missing if repr(name) in error.message), None)
                    if named is not None:
                        parts.append(named)
                errors.append({"path": _pointer(parts), "message": _message(error.message)})
                if len(errors) >= MAX_COLLECTED_ERRORS:
                    break
    except kind_checks.CheckTooCostly:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the validator raises, never a 500
        logger.warning("a kind schema could not be evaluated: %s", type(exc).__name__)
        raise SchemaUnusable(type(exc).__name__) from None
    errors.sort(key=lambda e: (e["path"], e["message"]))
    return errors[:MAX_DATA_ERRORS]


class SchemaUnusable(Exception):
    """The validator failed on its own account (not the data's): the stored schema is one
    today's registration checks would refuse."""


def check_data(rule: KindRule, data: Any) -> None:
    """INVALID_INPUT naming every failing path when `data` fails the kind's schema (or its
    check runs past its budget, or the stored schema cannot be evaluated)."""
    if rule.validator is None:
        return
    try:
        errors = data_errors(rule.validator, data)
    except kind_checks.CheckTooCostly:
        raise InvalidInput(
            f"'data' of kind '{rule.name}': {kind_checks.budget_message()}",
            field="data",
            details={
                "errors": [{"path": "", "message": kind_checks.budget_message()}],
                "limit_steps": settings.MEMORYHUB_KIND_CHECK_STEPS,
                "limit_ms": settings.MEMORYHUB_KIND_CHECK_MS,
            },
        ) from None
    except SchemaUnusable as exc:
        message = (
            f"the schema of kind '{rule.name}' cannot be evaluated ({exc}); "
            "an admin must register it again"
        )
        raise InvalidInput(
            f"'data': {message}",
            field="data",
            details={"errors": [{"path": "", "message": message}]},
        ) from None
    if errors:
        raise InvalidInput(
            f"'data' does not match the schema of kind '{rule.name}' "
            f"({errors[0]['path'] or '/'}: {errors[0]['message']})",
            field="data",
            details={"errors": errors},
        )


def _invalid_schema(message: str, pointer: str) -> InvalidInput:
    return InvalidInput(
        f"'schema': {_message(message)}",
        field="schema",
        details={"errors": [{"path": pointer, "message": _message(message)}]},
    )


def check_schema(schema: Any) -> None:
    """A kind's schema, refused unless it is a valid draft 2020-12 JSON Schema describing an
    object (a memory's `data` is one), within the size limits, with every pattern one RE2
    evaluates and every reference resolving within itself, that validates sample instances
    within the check's budget: nothing registered can make a later store fail otherwise than
    on its data."""
    if schema is None:
        return
    if not isinstance(schema, dict):
        raise InvalidInput("'schema' must be a JSON Schema object", field="schema")
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise InvalidInput(
            f"'schema' is larger than {MAX_SCHEMA_BYTES} bytes",
            field="schema",
            details={"limit_bytes": MAX_SCHEMA_BYTES},
        )
    dialect = schema.get("$schema")
    if dialect is not None and (
        not isinstance(dialect, str) or dialect.rstrip("#") != kind_checks.DRAFT_2020_12
    ):
        raise _invalid_schema(
            f"'$schema' must be {kind_checks.DRAFT_2020_12} (or left out)", "/$schema"
        )
    try:
        kind_schema_rules.check_limits(schema)
    except kind_schema_rules.SchemaProblem as problem:
        raise _invalid_schema(problem.message, problem.pointer) from None
    try:
        error = kind_checks.meta_errors(schema)
    except kind_checks.CheckTooCostly:
        raise _invalid_schema("the schema is too large to check", "") from None
    if error is not None:
        raise InvalidInput(
            f"'schema' is not a valid JSON Schema (draft 2020-12): {_message(error.message)}",
            field="schema",
            details={"errors": [{"path": _pointer(error.absolute_path), "message": error.message}]},
        )
    declared = schema.get("type")
    if (
        declared is not None
        and declared != "object"
        and not (isinstance(declared, list) and "object" in declared)
    ):
        raise InvalidInput(
            "'schema' must describe an object: a memory's data is a JSON object", field="schema"
        )
    try:
        kind_schema_rules.inspect(schema)
    except kind_schema_rules.SchemaProblem as problem:
        raise _invalid_schema(problem.message, problem.pointer) from None
    _exercise(schema)


def _exercise(schema: dict) -> None:
    """Validate a few sample instances with the new schema, as a store would: a schema that
    raises, or that runs past the budget on them, is refused now rather than on every store."""
    validator = kind_checks.validator_for(schema)
    for sample in kind_schema_rules.samples(schema):
        try:
            data_errors(validator, sample)
        except kind_checks.CheckTooCostly:
            raise _invalid_schema(
                "checking even a small object against this schema runs past the budget of one "
                f"check ({settings.MEMORYHUB_KIND_CHECK_STEPS} steps, "
                f"{settings.MEMORYHUB_KIND_CHECK_MS} ms)",
                "",
            ) from None
        except SchemaUnusable as exc:
            raise _invalid_schema(f"the schema cannot be evaluated ({exc})", "") from None

"""Import a tenant file (`memories.jsonl.export_tenant`) into a new or empty tenant, exactly.

The file is read a line at a time and written in batches, so its size does not bound what the
import holds in memory; everything is written in one transaction, so a bad line (named by its
number) leaves nothing behind. A tenant that holds anything already is refused
(`ImportRefused`): importing the same file twice never duplicates anything, it is refused.

Exact: memories keep their ids, versions, times and fields, revisions are the file's (actor,
version, time, change), threads keep their messages, summary and watermarks, and extraction
runs keep their ids where this instance has not used them (else they get new ones and the
memories' `evidence` follows). Nothing is re-embedded: a memory keeps its embedding and
its model's name (`reembed` moves those of another model).

The rules are the ones every write follows: each memory line passes the store API's field
rules and secret scan and a stored memory's checks (`services.jsonl_import`: `memory_fields`,
`apply`, `check`), kinds `services.kind_changes.kind_save`, agents `accounts.services` and
`services.policies`, webhooks `webhooks.endpoints.webhook_build` (a new secret each: the file
has none); messages, thread summaries and revisions are scanned for secrets too. Not carried:
API keys, operators, the event feed and webhook deliveries, idempotency records, job runs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, models, transaction

from accounts import services as account_services
from accounts.models import Agent, Tenant
from memories import kind_registry, validation
from memories.embeddings import get_embedder
from memories.ids import is_memory_id
from memories.jsonl import (
    KIND_FIELDS,
    MESSAGE_FIELDS,
    REVISION_FIELDS,
    RUN_FIELDS,
    SECTIONS,
    TENANT,
    TENANT_SETTINGS,
    THREAD_FIELDS,
)
from memories.models import (
    ExtractionRun,
    Kind,
    Memory,
    MemoryRevision,
    Message,
    Thread,
    WebhookEndpoint,
)
from memories.secrets_scan import secret_rule
from memories.services import jsonl_import as lines_rules
from memories.services.jsonl_import import UNIMPORTABLE_ID, ImportLineError
from memories.services.kind_changes import kind_save
from memories.services.policies import agent_policy_set, tenant_policy_set
from memories.vectors import write_pending_vectors
from memories.webhooks import signing
from memories.webhooks.endpoints import webhook_build
from memoryhub.errors import DomainError, InvalidInput, SecretRejected

BATCH = 500


class ImportRefused(Exception):
    """The file cannot go into that tenant at all (it holds data already); nothing written."""


@dataclass
class WebhookSecret:
    id: str
    url: str
    secret: str  # shown once


@dataclass
class TenantImportResult:
    tenant: Tenant
    counts: Counter[str] = field(default_factory=Counter)
    webhooks: list[WebhookSecret] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    # Memories whose embedding comes from another model than this instance's (`reembed`).
    other_model: int = 0
    runs_renumbered: int = 0


def tenant_import(
    *,
    lines: Iterable[str | bytes],
    slug: str | None = None,
    tenant: Tenant | None = None,
    batch_size: int = BATCH,
) -> TenantImportResult:
    """Import the tenant file `lines` into `tenant`, or the tenant `slug` (the file's own
    slug when None), created when it does not exist. Raises `ImportLineError` on the first bad
    line and `ImportRefused` when the tenant holds data; either way nothing is written."""
    numbered = lines_rules.numbered_lines(lines)
    with transaction.atomic():
        first = next(numbered, None)
        if first is None:
            raise ImportLineError(1, "the file is empty")
        number, raw = first
        header = lines_rules.json_object(number, raw)
        if header.get("type") != "header":
            raise ImportLineError(number, "a tenant file starts with its header line")
        lines_rules.check_header(number, header, contents=TENANT)
        target = _target(number, header, slug=slug, tenant=tenant)
        importer = _Importer(target, batch_size=batch_size)
        importer.settings(number, header)
        for number, raw in numbered:
            importer.line(number, lines_rules.json_object(number, raw))
        return importer.finish()


def _target(
    number: int, header: dict[str, Any], *, slug: str | None, tenant: Tenant | None
) -> Tenant:
    """The tenant to import into, locked for the transaction; refused unless it is empty."""
    if tenant is None:
        source = header.get("tenant")
        slug = slug or (source.get("slug") if isinstance(source, dict) else None)
        if not isinstance(slug, str):
            raise ImportLineError(number, "the header names no tenant")
        tenant = Tenant.objects.select_for_update().filter(slug=slug).first()
        if tenant is None:
            tenant = Tenant(slug=slug, name=slug)
            try:
                tenant.full_clean(validate_unique=False)
                with transaction.atomic():
                    tenant.save()
            except ValidationError:
                raise ImportRefused(
                    f"'{slug[:63]}' is not a tenant slug (a-z, 0-9, _, -)"
                ) from None
            except IntegrityError:  # created by someone else since the look above
                raise ImportRefused(
                    f"tenant '{slug}' was created meanwhile; nothing imported"
                ) from None
            return tenant
    else:
        Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    held = _holdings(tenant)
    if held:
        raise ImportRefused(
            f"tenant '{tenant.slug}' already holds data ({held}): a tenant file goes into a new "
            "or empty tenant only, so importing the same file twice is refused too. "
            "Nothing imported."
        )
    return tenant


def _holdings(tenant: Tenant) -> str:
    """What `tenant` holds, in words ("" when nothing). Kinds do not count: every tenant has
    the built-in ones, and the file's kinds define them as the source had them."""
    found = []
    for label, model in (
        ("memories", Memory),
        ("revisions", MemoryRevision),
        ("agents", Agent),
        ("threads", Thread),
        ("webhooks", WebhookEndpoint),
    ):
        if model.objects.for_tenant(tenant).exists():
            found.append(label)
    return ", ".join(found)


class _Importer:
    """The lines after the header, section by section (`memories.jsonl.SECTIONS`)."""

    def __init__(self, tenant: Tenant, *, batch_size: int):
        self.tenant = tenant
        self.batch_size = batch_size
        self.result = TenantImportResult(tenant=tenant)
        self.section = 0
        self.agents: dict[str, Agent] = {}
        self.reads_from: list[tuple[int, Agent, Any]] = []
        self.thread: Thread | None = None
        self.run_ids: dict[int, int] = {}  # a run's id in the file → here, where they differ
        self.kept_run_ids = False
        self.registry: kind_registry.Registry | None = None
        self.pending: dict[str, list[tuple[int, models.Model]]] = {
            "message": [],
            "memory": [],
            "revision": [],
        }

    # --- the tenant and the order of sections ----------------------------------------------

    def settings(self, number: int, header: dict[str, Any]) -> None:
        source = header.get("tenant")
        if not isinstance(source, dict):
            raise ImportLineError(number, "the header names no tenant")
        tenant = self.tenant
        try:
            tenant_policy_set(
                tenant=tenant,
                user_cap=source.get("user_cap", tenant.user_cap),
                max_retention=source.get("max_retention", tenant.max_retention),
            )
            account_services.tenant_extraction_budget_update(
                tenant=tenant,
                tokens=source.get(
                    "extraction_daily_token_budget", tenant.extraction_daily_token_budget
                ),
            )
        except InvalidInput as exc:
            raise ImportLineError(number, lines_rules.field_message(exc)) from None
        tenant.name = source.get("name") or tenant.slug
        tenant.workspace_cap = source.get("workspace_cap", tenant.workspace_cap)
        if source.get("created_at"):
            tenant.created_at = _timestamp(number, source["created_at"], "created_at")
        _clean(number, tenant, exclude=["slug"])
        Tenant.objects.filter(pk=tenant.pk).update(
            name=tenant.name, workspace_cap=tenant.workspace_cap, created_at=tenant.created_at
        )
        unknown = set(source) - {"slug", "name", "created_at", *TENANT_SETTINGS}
        if unknown:
            raise ImportLineError(number, f"unknown tenant field '{sorted(unknown)[0]}'")

    def line(self, number: int, record: dict[str, Any]) -> None:
        kind = record.get("type")
        if not isinstance(kind, str):
            raise ImportLineError(number, "a line of a tenant file has a 'type'")
        section = "thread" if kind in ("message", "run") else kind
        if section not in SECTIONS[1:]:
            raise ImportLineError(number, f"unknown line type {kind[:40]!r}")
        at = SECTIONS.index(section)
        if at < self.section:
            raise ImportLineError(
                number,
                f"a {kind} line after the {SECTIONS[self.section]} lines: a tenant file lists "
                "kinds, agents, threads (each with its messages and runs), memories, "
                "revisions and webhooks, in that order",
            )
        if at > self.section:
            self._flush()
            if self.section <= SECTIONS.index("agent") < at:
                self._link_agents()
            self.section = at
        getattr(self, f"_{kind}")(number, record)
        self.result.counts[kind] += 1

    def finish(self) -> TenantImportResult:
        self._flush()
        if self.section <= SECTIONS.index("agent"):
            self._link_agents()
        if self.kept_run_ids:
            _sequence_past(ExtractionRun)
        self.result.agents = sorted(self.agents)
        self.result.runs_renumbered = len(self.run_ids)
        model = get_embedder().model_name
        self.result.other_model = (
            Memory.objects.for_tenant(self.tenant)
            .exclude(embedding_model="")
            .exclude(embedding_model=model)
            .count()
        )
        return self.result

    # --- kinds and agents ------------------------------------------------------------------

    def _kind(self, number: int, record: dict[str, Any]) -> None:
        created = _timestamp(number, record.get("created_at"), "created_at")
        definition = {name: record.get(name) for name in KIND_FIELDS}
        name = record.get("name")
        if not isinstance(name, str):
            raise ImportLineError(number, "name: must be a kind's name")
        try:
            kind, _ = kind_save(tenant=self.tenant, name=name, data=definition, now=created)
        except DomainError as exc:
            raise ImportLineError(number, _message(exc)) from None
        updated = _timestamp(number, record.get("updated_at"), "updated_at")
        Kind.objects.filter(pk=kind.pk).update(updated_at=updated)

    def _agent(self, number: int, record: dict[str, Any]) -> None:
        slug, policy = record.get("slug"), record.get("policy") or {}
        if not isinstance(slug, str) or slug in self.agents:
            raise ImportLineError(number, "each agent line names a new agent by its slug")
        if not isinstance(policy, dict):
            raise ImportLineError(number, "policy: must be an object")
        policy = dict(policy)
        ttl = policy.get("default_ttl")
        if ttl is not None:
            if isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0:
                raise ImportLineError(number, "default_ttl: must be a number of seconds")
            policy["default_ttl"] = timedelta(seconds=ttl)
        name = record.get("name") or ""
        try:
            agent = account_services.agent_create(
                tenant=self.tenant, slug=slug, name=name if isinstance(name, str) else ""
            )
            agent_policy_set(tenant=self.tenant, agent=agent, **policy)
        except DomainError as exc:
            raise ImportLineError(number, _message(exc)) from None
        times = {
            name: _timestamp(number, record.get(name), name)
            for name in ("created_at", "updated_at")
        }
        Agent.objects.filter(pk=agent.pk).update(**times)
        self.agents[slug] = agent
        self.reads_from.append((number, agent, record.get("reads_from") or []))

    def _link_agents(self) -> None:
        for number, agent, slugs in self.reads_from:
            if not isinstance(slugs, list) or not all(isinstance(s, str) for s in slugs):
                raise ImportLineError(number, "reads_from: must be a list of agent slugs")
            missing = sorted(set(slugs) - set(self.agents))
            if missing:
                raise ImportLineError(number, f"reads_from: no agent '{missing[0]}' in the file")
            agent.reads_from.set([self.agents[s] for s in slugs])
        self.reads_from = []

    def _owner(self, number: int, slug: Any) -> Agent:
        agent = self.agents.get(slug) if isinstance(slug, str) else None
        if agent is None:
            raise ImportLineError(number, f"no agent {str(slug)[:63]!r} among the file's agents")
        return agent

    # --- threads, messages, runs -----------------------------------------------------------

    def _thread(self, number: int, record: dict[str, Any]) -> None:
        lines_rules.secret_free(
            number, {"thread_id": record.get("thread_id"), "subject_id": record.get("subject_id")}
        )
        _no_secret(number, "summary", record.get("summary"))
        thread = Thread(tenant=self.tenant, agent=self._owner(number, record.get("agent")))
        _fill(number, thread, record, THREAD_FIELDS)
        _clean(number, thread, exclude=["tenant", "agent"])
        _save(number, thread)
        self.thread = thread

    def _message(self, number: int, record: dict[str, Any]) -> None:
        if self.thread is None:
            raise ImportLineError(number, "a message line follows its thread's line")
        _no_secret(number, "content", record.get("content"))
        message = Message(tenant=self.tenant, thread=self.thread)
        _fill(number, message, record, MESSAGE_FIELDS)
        _clean(number, message, exclude=["tenant", "thread"])
        self._add("message", number, message)

    def _run(self, number: int, record: dict[str, Any]) -> None:
        thread = self.thread
        if thread is None:
            raise ImportLineError(number, "a run line follows its thread's line")
        run = ExtractionRun(tenant=self.tenant, thread=thread, agent=thread.agent)
        _fill(number, run, record, RUN_FIELDS)
        _clean(number, run, exclude=["tenant", "thread", "agent"])
        given = record.get("id")
        if isinstance(given, bool) or not isinstance(given, int) or not 0 < given < 2**63:
            raise ImportLineError(number, "id: must be a positive whole number")
        free = not ExtractionRun.objects.filter(pk=given).exists()
        if free:
            run.pk = given
            self.kept_run_ids = True
        _save(number, run)
        if not free:
            self.run_ids[given] = run.pk

    # --- memories and revisions ------------------------------------------------------------

    def _memory(self, number: int, record: dict[str, Any]) -> None:
        record = lines_rules.memory_fields(number, record)
        if not is_memory_id(record["id"]):
            raise ImportLineError(number, UNIMPORTABLE_ID)
        slug = record.get("agent")
        agent = self._owner(number, slug) if slug is not None else None
        if self.registry is None:
            self.registry = kind_registry.registry(Tenant.objects.get(pk=self.tenant.pk))
        memory = Memory(id=record["id"], tenant=self.tenant)
        lines_rules.apply(memory, record, agent, self.registry)
        memory.evidence = self._evidence(memory.evidence)
        lines_rules.check(number, memory, self.registry, queries=False)
        self._add("memory", number, memory)

    def _revision(self, number: int, record: dict[str, Any]) -> None:
        memory_id = record.get("memory_id")
        if not isinstance(memory_id, str) or not is_memory_id(memory_id):
            raise ImportLineError(number, "memory_id: not a memory id")
        for name in ("before", "after"):
            snapshot = record.get(name)
            if snapshot is not None and not isinstance(snapshot, dict):
                raise ImportLineError(number, f"{name}: must be an object or null")
            if snapshot:
                lines_rules.secret_free(number, snapshot)
                record[name] = {**snapshot, "evidence": self._evidence(snapshot.get("evidence"))}
        _no_secret(number, "reason", record.get("reason"))
        revision = MemoryRevision(tenant=self.tenant, memory_id=memory_id)
        _fill(number, revision, record, REVISION_FIELDS)
        _clean(number, revision, exclude=["tenant", "memory"])
        self._add("revision", number, revision)

    def _evidence(self, evidence: Any) -> Any:
        """`evidence` naming this instance's id of its run (the file's, unless it was taken)."""
        if not self.run_ids or not isinstance(evidence, dict):
            return evidence
        run_id = evidence.get("run_id")
        if isinstance(run_id, int) and run_id in self.run_ids:
            return {**evidence, "run_id": self.run_ids[run_id]}
        return evidence

    # --- webhooks --------------------------------------------------------------------------

    def _webhook(self, number: int, record: dict[str, Any]) -> None:
        try:
            endpoint = webhook_build(
                tenant=self.tenant,
                url=record.get("url"),
                events=record.get("events"),
                description=record.get("description"),
            )
        except DomainError as exc:
            raise ImportLineError(number, _message(exc)) from None
        given = record.get("id")
        # Its id where this instance has none of it (a webhook id is global).
        if (
            isinstance(given, str)
            and given.startswith("wh_")
            and len(given) <= 30
            and not WebhookEndpoint.objects.filter(pk=given).exists()
        ):
            endpoint.pk = given
        secret = signing.new_secret()
        endpoint.secret_encrypted = signing.encrypt(secret)
        # No event of this tenant exists here yet: it receives every one from the first.
        endpoint.cursor = 0
        created_by = record.get("created_by")
        endpoint.created_by = created_by if isinstance(created_by, str) else ""
        endpoint.created_at = _timestamp(number, record.get("created_at"), "created_at")
        if record.get("disabled_at") is not None:
            endpoint.disabled_at = _timestamp(number, record["disabled_at"], "disabled_at")
            endpoint.disabled_reason = str(record.get("disabled_reason") or "")[:200]
        _clean(number, endpoint, exclude=["tenant"])
        _save(number, endpoint)
        self.result.webhooks.append(WebhookSecret(id=endpoint.pk, url=endpoint.url, secret=secret))

    # --- batches ---------------------------------------------------------------------------

    def _add(self, kind: str, number: int, row: models.Model) -> None:
        batch = self.pending[kind]
        batch.append((number, row))
        if len(batch) >= self.batch_size:
            self._flush()

    def _flush(self) -> None:
        for kind, batch in self.pending.items():
            if batch:
                if kind == "memory":
                    self._claim_ids(batch)
                _insert(batch)
                batch.clear()

    def _claim_ids(self, batch: list[tuple[int, models.Model]]) -> None:
        """The first line whose memory id is taken: by this import (a repeated id), or by another
        tenant (said as `UNIMPORTABLE_ID`, as the memories file's import says it)."""
        held = dict(
            Memory.objects.filter(pk__in=[row.pk for _, row in batch]).values_list(
                "pk", "tenant_id"
            )
        )
        seen: set[str] = set()
        for number, row in batch:
            if row.pk in seen or held.get(row.pk) == self.tenant.pk:
                raise ImportLineError(number, "the same memory id appears twice")
            if row.pk in held:
                raise ImportLineError(number, UNIMPORTABLE_ID)
            seen.add(row.pk)


def _insert(batch: list[tuple[int, models.Model]]) -> None:
    """Insert the rows of `batch` at once; when that fails, one at a time, to name the line."""
    model = type(batch[0][1])
    try:
        with transaction.atomic():
            model.objects.bulk_create([row for _, row in batch])  # type: ignore[attr-defined]
            if model is Memory:  # and their vectors, which are not columns of theirs
                write_pending_vectors([row for _, row in batch])  # type: ignore[misc]
        return
    except IntegrityError:
        pass
    for number, row in batch:
        _save(number, row)


def _save(number: int, row: models.Model) -> None:
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError as exc:
        raise ImportLineError(number, _constraint_message(exc, row)) from None


def _constraint_message(exc: IntegrityError, row: models.Model) -> str:
    if isinstance(row, Memory):
        return lines_rules.integrity_message(exc, row)
    constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
    if isinstance(row, MemoryRevision) and constraint == "revision_version_uniq":
        return f"memory {row.memory_id} has a revision of version {row.version} already"
    if isinstance(row, Thread) and constraint == "thread_identity_uniq":
        return f"thread '{row.thread_id[:80]}' of this agent and subject appears twice"
    if isinstance(row, Message) and constraint:
        return f"message {row.seq} of its thread appears twice"
    return f"violates the database constraint {constraint or 'of this table'}"


def _fill(number: int, row: models.Model, record: dict[str, Any], fields: tuple[str, ...]) -> None:
    """The line's values of `fields` on `row` (a missing one keeps the model's default)."""
    for name in fields:
        if name not in record:
            continue
        value = record[name]
        if value is not None and isinstance(row._meta.get_field(name), models.DateTimeField):
            value = _timestamp(number, value, name)
        setattr(row, name, value)


def _clean(number: int, row: models.Model, *, exclude: list[str]) -> None:
    """The model's field validators (types, lengths, choices, ranges); the unique and check
    constraints are the database's, at the insert."""
    try:
        row.full_clean(exclude=exclude, validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ImportLineError(number, lines_rules.first_error(exc)) from None


def _message(exc: DomainError) -> str:
    """A service's refusal as a line's error; a secret by its rule and field, never its value."""
    if isinstance(exc, SecretRejected):
        field, rule = exc.details.get("field"), exc.details.get("rule")
        return f"{field}: a secret-shaped value ({rule}) is never stored"
    return lines_rules.field_message(exc)


def _timestamp(number: int, value: Any, name: str) -> datetime:
    try:
        return validation.parse_timestamp(value, name)
    except InvalidInput as exc:
        raise ImportLineError(number, lines_rules.field_message(exc)) from None


def _no_secret(number: int, name: str, value: Any) -> None:
    if isinstance(value, str) and value and (rule := secret_rule(value)) is not None:
        raise ImportLineError(number, f"{name}: a secret-shaped value ({rule}) is never stored")


def _sequence_past(model: type[models.Model]) -> None:
    """Move the id sequence of `model` past the ids an import wrote itself (never back)."""
    table = model._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(s::regclass, GREATEST((SELECT max(id) FROM "
            + connection.ops.quote_name(table)
            + "), COALESCE(pg_sequence_last_value(s::regclass), 1))) "
            "FROM (SELECT pg_get_serial_sequence(%s, 'id') AS s) AS q",
            [table],
        )


__all__ = [
    "ImportRefused",
    "TenantImportResult",
    "WebhookSecret",
    "tenant_import",
]

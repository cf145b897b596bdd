"""Writes for tenants, operators, agents and API keys (commands and console share these)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from accounts import keys
from accounts.models import Agent, ApiKey, Membership, Role, Scope, Tenant
from memoryhub.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from django.contrib.auth.models import User as UserModel

User = get_user_model()

# The agent policy of memory formation: `agent_policy`, the console's form, this.
EXTRACTION_POLICY_FIELDS = (
    "extraction",
    "extraction_idle_seconds",
    "extraction_min_confidence",
    "review_below",
    "extraction_categories",
    "summary_threshold_bytes",
    "extraction_max_operations",
)
# Hydrate's block limits.
BLOCK_POLICY_FIELDS = ("core_max_entries", "core_max_chars", "archival_max_chars")
AGENT_POLICY_FIELDS = (
    "entry_cap",
    "hydration_budget_bytes",
    "default_category",
    "dedup_threshold",
    "default_ttl",
    *BLOCK_POLICY_FIELDS,
    "max_retention",
    "context_messages",
    "formation_user_scope",
    *EXTRACTION_POLICY_FIELDS,
)
TENANT_POLICY_FIELDS = ("user_cap", "max_retention")


def tenant_get_or_create(*, slug: str, name: str = "") -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


def tenant_extraction_budget_update(*, tenant: Tenant, tokens: int) -> Tenant:
    """Set the LLM tokens memory formation may spend per UTC day, all agents of the tenant
    together (0: no limit). Over it, extraction runs wait `deferred` until the day turns."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise InvalidInput(
            "'extraction_daily_token_budget' must be a whole number of tokens, 0 or more",
            field="extraction_daily_token_budget",
        )
    Tenant.objects.filter(pk=tenant.pk).update(extraction_daily_token_budget=tokens)
    tenant.extraction_daily_token_budget = tokens
    return tenant


@transaction.atomic
def _tenant_policy_write(*, tenant: Tenant, **policy: Any) -> Tenant:
    """Internal: validate and write a tenant's policy row (`user_cap`, `max_retention`) only.
    Call `memories.services.policies.tenant_policy_set`, the one entry point, which also
    recomputes the expiry of the memories a retention change governs. (The entry point lives in
    the memories app because this module sits below it and never imports memories; so the row
    write stays here, private to that one caller.)"""
    unknown = set(policy) - set(TENANT_POLICY_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown policy field: {sorted(unknown)[0]}", field=sorted(unknown)[0])
    for name, value in policy.items():
        setattr(tenant, name, value)
    try:
        tenant.full_clean(exclude=["slug"])
    except Exception as exc:  # ValidationError: name the first field
        field = next(iter(getattr(exc, "message_dict", {"policy": None})))
        raise InvalidInput(f"Invalid value for {field}", field=field) from exc
    Tenant.objects.filter(pk=tenant.pk).update(**policy)
    return tenant


def agent_get_or_create(*, tenant: Tenant, slug: str, name: str = "") -> Agent:
    agent, _ = Agent.objects.get_or_create(
        tenant=tenant, slug=slug, defaults={"name": name or slug}
    )
    return agent


def agent_create(*, tenant: Tenant, slug: str, name: str = "") -> Agent:
    """Create an agent of `tenant` (named after its slug unless `name` is given) from a slug
    that comes from outside, such as a JSONL import's line: a slug the model refuses is
    INVALID_INPUT on `slug`, with nothing written."""
    agent = Agent(tenant=tenant, slug=slug, name=name or slug)
    try:
        agent.full_clean(exclude=["tenant", "reads_from"])
    except ValidationError as exc:
        raise InvalidInput("Invalid agent slug", field="slug") from exc
    agent.save()
    return agent


@transaction.atomic
def _agent_policy_write(
    *, tenant: Tenant, agent: Agent, reads_from: list[str] | None = None, **policy: Any
) -> Agent:
    """Internal: validate and write an agent's policy row only; `reads_from` names other agents
    of the same tenant. Call `memories.services.policies.agent_policy_set`, the one entry point,
    which also recomputes the expiry of the memories a retention change governs (see
    `_tenant_policy_write` for why the two live in different apps)."""
    if agent.tenant_id != tenant.pk:
        raise NotFound("No such agent")
    unknown = set(policy) - set(AGENT_POLICY_FIELDS)
    if unknown:
        raise InvalidInput(f"Unknown policy field: {sorted(unknown)[0]}", field=sorted(unknown)[0])
    for name, value in policy.items():
        setattr(agent, name, value)
    agent.updated_at = timezone.now()
    try:
        agent.full_clean(exclude=["tenant", "reads_from"])
    except Exception as exc:  # ValidationError: name the first field
        field = next(iter(getattr(exc, "message_dict", {"policy": None})))
        raise InvalidInput(f"Invalid value for {field}", field=field) from exc
    agent.save()
    if reads_from is not None:
        slugs = [s for s in dict.fromkeys(reads_from) if s != agent.slug]
        others = list(Agent.objects.for_tenant(tenant).filter(slug__in=slugs))
        missing = set(slugs) - {a.slug for a in others}
        if missing:
            raise InvalidInput(
                f"No agent '{sorted(missing)[0]}' in this tenant", field="reads_from"
            )
        agent.reads_from.set(others)
    return agent


def api_key_create(
    *,
    tenant: Tenant,
    agent: Agent,
    scopes: list[str] | None = None,
    subject_id: str | None = None,
    expires_in: timedelta | None = None,
    name: str = "",
    created_by: str = "",
    memory_ttl: timedelta | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the raw key, which is never stored and shown once.
    `memory_ttl`: every memory written through the key expires at most that long after its
    last write."""
    if agent.tenant_id != tenant.pk:
        raise NotFound("No such agent")
    scopes = list(dict.fromkeys(scopes or [Scope.READ, Scope.WRITE]))
    bad = [s for s in scopes if s not in Scope.values]
    if bad:
        raise InvalidInput(f"Unknown scope '{bad[0]}'", field="scope")
    raw = keys.generate_key()
    expires_at: datetime | None = timezone.now() + expires_in if expires_in else None
    api_key = ApiKey.objects.create(
        tenant=tenant,
        agent=agent,
        name=name,
        prefix=keys.lookup_prefix(raw),
        key_hash=keys.hash_key(raw),
        scopes=scopes,
        subject_id=subject_id or None,
        expires_at=expires_at,
        created_by=created_by,
        memory_ttl=memory_ttl,
    )
    return api_key, raw


def api_key_revoke(*, tenant: Tenant, key_id: int) -> ApiKey:
    api_key = ApiKey.objects.for_tenant(tenant).filter(pk=key_id).first()
    if api_key is None:
        raise NotFound("No such key")
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
    return api_key


@transaction.atomic
def operator_password_reset(*, email: str, password: str) -> UserModel:
    """Give an existing operator a new password (their memberships and roles stay as they are);
    a new one is refused: `operator_create` makes operators."""
    user = User.objects.filter(username=email.strip().lower()).first()
    if user is None:
        raise NotFound(f"No operator {email.strip().lower()}")
    if not password:
        raise InvalidInput("A password is required", field="password")
    user.set_password(password)
    user.save(update_fields=["password"])
    return user


def operator_create(
    *, tenant: Tenant, email: str, password: str | None, role: str = Role.ADMIN
) -> Membership:
    """Create (or update) an operator and give them `role` in `tenant`."""
    if role not in Role.values:
        raise InvalidInput(f"Unknown role '{role}'", field="role")
    email = email.strip().lower()
    user = User.objects.filter(username=email).first()
    if user is None:
        user = User.objects.create_user(username=email, email=email, password=password)
    elif password:
        user.set_password(password)
        user.save(update_fields=["password"])
    membership, created = Membership.objects.get_or_create(
        tenant=tenant, user=user, defaults={"role": role}
    )
    if not created and membership.role != role:
        membership.role = role
        membership.save(update_fields=["role"])
    return membership

"""Who is calling: the agent behind an API key (or an operator acting in the console)."""

from __future__ import annotations

from dataclasses import dataclass, field

from accounts.models import Agent, ApiKey, Tenant
from memoryhub.errors import ScopeDenied


@dataclass(frozen=True)
class Principal:
    """An authenticated agent: its tenant, agent, key scopes and optional subject binding."""

    tenant: Tenant
    agent: Agent
    scopes: frozenset[str] = field(default_factory=lambda: frozenset({"read", "write"}))
    bound_subject: str | None = None
    api_key: ApiKey | None = None
    # Who revisions name when not the agent itself (`system:extract` forms memories for it).
    actor_name: str | None = None

    # DRF treats request.user as a user object.
    is_authenticated = True
    is_anonymous = False

    @property
    def actor(self) -> str:
        return self.actor_name or f"agent:{self.agent.slug}"

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def require_scope(self, scope: str) -> None:
        if not self.has_scope(scope):
            raise ScopeDenied(f"This key lacks the '{scope}' scope", details={"scope": scope})

    def require_tenant_wide(self, scope: str) -> None:
        """`scope`, for an action over the whole tenant (its webhooks, its kinds): a key bound
        to a subject acts for that subject only, so it may take none of them, whatever its
        scopes (a webhook would receive every subject's events)."""
        self.require_scope(scope)
        if self.bound_subject is not None:
            raise ScopeDenied(
                "This key is bound to a subject: it acts for that subject only, and this action "
                "spans the whole tenant (use a key without a subject)",
                details={"scope": scope, "subject_bound": True},
            )

    def resolve_subject(self, requested: str | None) -> str | None:
        """The subject a request acts for; a key bound to a subject may name no other."""
        if self.bound_subject is None:
            return requested or None
        if requested not in (None, "", self.bound_subject):
            raise ScopeDenied(
                "This key is bound to another subject", details={"field": "subject_id"}
            )
        return self.bound_subject

    @classmethod
    def from_key(cls, key: ApiKey) -> Principal:
        return cls(
            tenant=key.tenant,
            agent=key.agent,
            scopes=frozenset(key.scopes),
            bound_subject=key.subject_id,
            api_key=key,
        )

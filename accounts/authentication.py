"""Bearer API-key authentication for DRF: `Authorization: Bearer mh_…`.

A malformed key (shape or checksum) is rejected before any query; a well-formed one is found
by its prefix and proven by a constant-time hash compare. Missing, malformed, unknown, revoked
and expired keys all get the same 401 body.
"""

from __future__ import annotations

from django.contrib.postgres.expressions import ArraySubquery
from django.db.models import OuterRef
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from accounts import keys
from accounts.models import Agent, ApiKey
from accounts.principal import Principal
from memoryhub.errors import Unauthenticated


def authenticate_key(raw: str | None) -> Principal:
    """Resolve a raw key to its principal or raise Unauthenticated (one error for all cases)."""
    if not raw or not keys.is_well_formed(raw):
        raise Unauthenticated()
    # One query: the key, its agent and tenant, and the agent's reads_from ids (which every
    # visibility check needs), so an authenticated read costs no extra round trip.
    api_key = (
        ApiKey.objects.select_related("agent", "tenant")
        .annotate(
            reads_from_ids=ArraySubquery(
                Agent.reads_from.through.objects.filter(from_agent_id=OuterRef("agent_id")).values(
                    "to_agent_id"
                )
            )
        )
        .filter(prefix=keys.lookup_prefix(raw))
        .first()
    )
    now = timezone.now()
    if api_key is None or not keys.matches(raw, api_key.key_hash) or not api_key.is_active(now):
        raise Unauthenticated()
    if api_key.last_used_at is None or now - api_key.last_used_at > ApiKey.LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    api_key.agent._reads_from_ids = sorted(api_key.reads_from_ids)
    return Principal.from_key(api_key)


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request):
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION"))
        principal = authenticate_key(token)
        request._request.principal = principal
        return principal, principal.api_key

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="memoryhub"'


class HasAgentKey(BasePermission):
    """Every API view needs an authenticated agent key; scope checks happen per action."""

    def has_permission(self, request, view) -> bool:
        return isinstance(request.user, Principal)

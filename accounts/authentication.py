"""Bearer API-key authentication for DRF: `Authorization: Bearer mh_…`.

A malformed key (shape or checksum) is rejected before any query; a well-formed one is found
by its prefix and proven by a constant-time hash compare. Missing, malformed, unknown, revoked
and expired keys all get the same 401 body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connection, models
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication
from rest_framework.permissions import BasePermission

from accounts import keys
from accounts.models import Agent, ApiKey, Tenant
from accounts.principal import Principal
from memoryhub.errors import WWW_AUTHENTICATE, Unauthenticated

if TYPE_CHECKING:  # DRF imports this module while it loads its views
    from rest_framework.request import Request
    from rest_framework.views import APIView


def _columns(model: type[models.Model]) -> list[str]:
    return [field.column for field in model._meta.concrete_fields]


def _lookup_sql() -> str:
    """The key, its agent and tenant, and the agent's reads_from ids (which every visibility
    check needs) in one statement. Written once here rather than through the ORM, whose query
    compilation costs more than the query itself on every authenticated request."""
    parts = [
        ", ".join(f'{alias}."{column}"' for column in _columns(model))
        for alias, model in (("k", ApiKey), ("a", Agent), ("t", Tenant))
    ]
    through = Agent.reads_from.through._meta.db_table
    return (
        f"SELECT {', '.join(parts)}, "
        f"ARRAY(SELECT r.to_agent_id FROM {through} r WHERE r.from_agent_id = k.agent_id "
        "ORDER BY r.to_agent_id) "
        f"FROM {ApiKey._meta.db_table} k "
        f"JOIN {Agent._meta.db_table} a ON a.id = k.agent_id "
        f"JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id "
        "WHERE k.prefix = %s"
    )


LOOKUP_SQL = _lookup_sql()


# A model, its column count, its attribute names, and (position, converter) for the columns
# that need one.
_Loading = tuple[type[models.Model], int, list[str], list[tuple[int, Callable[..., Any]]]]


def _loading(model: type[models.Model]) -> _Loading:
    """What loading `model` from its columns of the lookup row needs, worked out once."""
    fields = model._meta.concrete_fields
    converted = [(i, f.from_db_value) for i, f in enumerate(fields) if hasattr(f, "from_db_value")]
    return model, len(fields), [field.attname for field in fields], converted


# The lookup row's models in column order: the key, its agent, the tenant.
_LOADING = [_loading(model) for model in (ApiKey, Agent, Tenant)]


def _find_key(prefix: str) -> ApiKey | None:
    with connection.cursor() as cursor:
        cursor.execute(LOOKUP_SQL, [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    instances: list[Any] = []  # the key, its agent, the tenant
    start = 0
    for model, count, names, converted in _LOADING:
        values = list(row[start : start + count])
        # As the ORM loads them (a JSON column arrives as text from a raw cursor).
        for position, from_db_value in converted:
            values[position] = from_db_value(values[position], None, connection)
        instances.append(model.from_db(connection.alias, names, values))
        start += count
    api_key: ApiKey
    agent: Agent
    tenant: Tenant
    api_key, agent, tenant = instances
    agent.tenant = tenant
    agent._reads_from_ids = list(row[-1])
    api_key.agent, api_key.tenant = agent, tenant
    return api_key


def authenticate_key(raw: str | None) -> Principal:
    """Resolve a raw key to its principal or raise Unauthenticated (one error for all cases)."""
    if not raw or not keys.is_well_formed(raw):
        raise Unauthenticated()
    api_key = _find_key(keys.lookup_prefix(raw))
    now = timezone.now()
    if api_key is None or not keys.matches(raw, api_key.key_hash) or not api_key.is_active(now):
        raise Unauthenticated()
    if api_key.last_used_at is None or now - api_key.last_used_at > ApiKey.LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return Principal.from_key(api_key)


def bearer_token(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Principal, ApiKey | None]:
        token = bearer_token(request.META.get("HTTP_AUTHORIZATION"))
        principal = authenticate_key(token)
        # On the Django request under DRF's, where middleware and logging read them.
        django_request: Any = request._request
        django_request.principal = principal
        django_request.tenant = principal.tenant
        django_request.agent = principal.agent
        return principal, principal.api_key

    def authenticate_header(self, request: Request) -> str:
        return WWW_AUTHENTICATE


class HasAgentKey(BasePermission):
    """Every API view needs an authenticated agent key; scope checks happen per action."""

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.user, Principal)

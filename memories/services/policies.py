"""Policy changes that move memories: an agent's or a tenant's `max_retention`.

`accounts.services` changes the policy rows; this module, which the `agent_policy` and
`tenant_policy` commands and the console call, also stores the effective expiry of the memories
the change governs again (`retention.expiry_recompute`), in the same transaction: a memory
past its new retention is invisible the moment the change commits.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from accounts import services as account_services
from accounts.models import Agent, Tenant
from memories.retention import expiry_recompute
from memoryhub.durations import parse_duration
from memoryhub.errors import InvalidInput


def retention_changes(current: dict[str, int], assignments: list[str]) -> dict[str, int]:
    """`current` with `CATEGORY=DURATION` assignments applied (`CATEGORY=none` clears one), as
    the commands and the console's fields take them: `daily=72h`, `core=365d`."""
    out = dict(current)
    for raw in assignments:
        category, sep, duration = (part.strip() for part in raw.partition("="))
        if not sep or not category:
            raise InvalidInput(
                f"“{raw[:60]}” is not CATEGORY=DURATION (e.g. daily=72h)", field="max_retention"
            )
        if duration.lower() in ("none", ""):
            out.pop(category, None)
            continue
        try:
            out[category] = int(parse_duration(duration).total_seconds())
        except ValueError as exc:
            raise InvalidInput(f"{category}: {exc}", field="max_retention") from None
    return out


def _moved(old: dict[str, int], new: dict[str, int]) -> list[str]:
    return sorted(c for c in set(old) | set(new) if old.get(c) != new.get(c))


def agent_policy_set(
    *, tenant: Tenant, agent: Agent, reads_from: list[str] | None = None, **policy: Any
) -> Agent:
    """`accounts.services.agent_policy_update`, and the expiry of the agent's memories of every
    category whose retention it changes."""
    with transaction.atomic():
        old = dict(agent.max_retention)
        agent = account_services.agent_policy_update(
            tenant=tenant, agent=agent, reads_from=reads_from, **policy
        )
        expiry_recompute(tenant=tenant, agent=agent, categories=_moved(old, agent.max_retention))
    return agent


def tenant_policy_set(*, tenant: Tenant, **policy: Any) -> Tenant:
    """`accounts.services.tenant_policy_update`, and the expiry of the tenant's memories of
    every category whose retention it changes (an agent's own entry still wins)."""
    with transaction.atomic():
        old = dict(tenant.max_retention)
        tenant = account_services.tenant_policy_update(tenant=tenant, **policy)
        expiry_recompute(tenant=tenant, categories=_moved(old, tenant.max_retention))
    return tenant

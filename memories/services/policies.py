"""The one entry point of a policy change, an agent's or a tenant's: `agent_policy_set`,
`tenant_policy_set`. The `agent_policy` and `tenant_policy` commands and the console call them.

The policy row is written by `accounts.services` (`_agent_policy_write`, `_tenant_policy_write`:
private, for these two only); what affects a memory's lifetime, `max_retention`, is folded into
the stored expiry of every memory it governs again here (`retention.expiry_recompute`), in the
same transaction: a memory past its new retention is invisible the moment the change commits.
(The rest of a policy, `default_ttl` included, applies to later writes only.) The entry point is
in this app because `accounts.services` sits below memories and never imports it
(tests/foundation/test_architecture.py).
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
    """Change an agent's policy (any of its fields; `reads_from`: other agents' slugs) and the
    expiry of the agent's memories of every category whose retention it changes."""
    with transaction.atomic():
        old = dict(agent.max_retention)
        agent = account_services._agent_policy_write(
            tenant=tenant, agent=agent, reads_from=reads_from, **policy
        )
        expiry_recompute(tenant=tenant, agent=agent, categories=_moved(old, agent.max_retention))
    return agent


def tenant_policy_set(*, tenant: Tenant, **policy: Any) -> Tenant:
    """Change a tenant's policy (`user_cap`, `max_retention`) and the expiry of the tenant's
    memories of every category whose retention it changes (an agent's own entry still wins)."""
    with transaction.atomic():
        old = dict(tenant.max_retention)
        tenant = account_services._tenant_policy_write(tenant=tenant, **policy)
        expiry_recompute(tenant=tenant, categories=_moved(old, tenant.max_retention))
    return tenant

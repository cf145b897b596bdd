"""A policy change has one entry point, `memories.services.policies` (`agent_policy_set`,
`tenant_policy_set`): whoever calls it (the `agent_policy` and `tenant_policy` commands, the
console's agent and tenant pages), a retention change moves the stored expiry of the memories
it governs in the same transaction. The row writes of `accounts.services` are private to it
(tests/foundation/test_architecture.py holds who calls them)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from accounts import services as account_services
from accounts.principal import Principal
from memories.models import Memory
from memories.services.store import memory_store

pytestmark = pytest.mark.django_db


def _store(agent, text: str, **fields) -> Memory:
    principal = Principal(tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write"}))
    body = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=body).memory


def _expiry_after(memory: Memory) -> timedelta | None:
    memory.refresh_from_db()
    return None if memory.expires_at is None else memory.expires_at - memory.updated_at


def test_accounts_offers_no_public_policy_write():
    public = {name for name in vars(account_services) if not name.startswith("_")}
    assert not {"agent_policy_update", "tenant_policy_update"} & public


def test_the_agent_policy_command_moves_the_expiry(agent):
    memory = _store(agent, "Kept for now")
    assert _expiry_after(memory) is None
    out = StringIO()
    call_command(
        "agent_policy",
        "--tenant",
        "acme",
        "--agent",
        agent.slug,
        "--max-retention",
        "core=1h",
        stdout=out,
    )
    assert _expiry_after(memory) == timedelta(hours=1)
    call_command(
        "agent_policy",
        "--tenant",
        "acme",
        "--agent",
        agent.slug,
        "--max-retention",
        "core=none",
        stdout=out,
    )
    assert _expiry_after(memory) is None


def test_the_tenant_policy_command_moves_the_expiry(agent):
    memory = _store(agent, "A shared rule", category="workspace")
    out = StringIO()
    call_command("tenant_policy", "--tenant", "acme", "--max-retention", "workspace=2d", stdout=out)
    assert _expiry_after(memory) == timedelta(days=2)


def test_the_console_agent_page_moves_the_expiry(client, owner, agent):
    memory = _store(agent, "A daily note", category="daily")
    assert _expiry_after(memory) == timedelta(hours=72)  # the category's own lifetime
    client.force_login(owner)
    response = client.post(
        f"/console/agents/{agent.slug}/",
        {
            "entry_cap": 1000,
            "hydration_budget_bytes": 8000,
            "default_category": "core",
            "dedup_threshold": 0.9,
            "max_retention": "daily=12h",
        },
    )
    assert response.status_code == 302
    assert _expiry_after(memory) == timedelta(hours=12)

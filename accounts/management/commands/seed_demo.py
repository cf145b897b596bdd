"""`python manage.py seed_demo` (what `make run` calls): a demo tenant to try MemoryHub with.

It creates tenant `demo`, operator `admin@example.com` (owner) and agent `demo-agent` with an
API key, printed once, and a little data that shows each concept as it is meant to be used
(the README's glossary names them):

- facts about one end user, subject `alice` (only a request for alice sees them), and one
  about `bob`;
- a subject-less memory of the agent itself (how it works, for every end user: no personal
  fact is ever subject-less, so none leaks into a subject's context);
- a workspace fact, read by every agent of the tenant;
- an inferred memory the agent is not sure of (confidence 0.6), waiting in the review queue;
- a conversation (thread `support-42` with alice), handed over as messages.

Everything goes through the services the API uses. Later runs leave everything as it is.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.core.management.base import BaseCommand

from accounts.models import Agent, Membership, Tenant
from accounts.principal import Principal
from accounts.services import (
    agent_get_or_create,
    api_key_create,
    operator_create,
    tenant_get_or_create,
)
from memories.formation.ingest import thread_messages_add
from memories.services.store import memory_store

DEMO_TENANT, DEMO_EMAIL, DEMO_AGENT = "demo", "admin@example.com", "demo-agent"

DEMO_MEMORIES = (
    # The agent's own way of working: subject-less, so every end user's requests see it.
    {
        "key": "policy.escalation",
        "text": "Escalate billing disputes over 500 EUR to a human agent.",
        "tags": ["billing", "policy"],
    },
    # Facts about end user alice: only requests acting for subject alice see them.
    {
        "key": "pref.language",
        "subject_id": "alice",
        "text": "Alice prefers answers in French.",
        "tags": ["preference"],
    },
    {
        "subject_id": "alice",
        "text": "Alice is allergic to peanuts.",
        "tags": ["health"],
        "importance": 0.9,
    },
    {
        "subject_id": "alice",
        "category": "daily",
        "text": "Alice asked about the March invoice today.",
        "tags": ["billing"],
    },
    # Another end user: alice's requests never see this, nor bob's hers.
    {
        "key": "pref.language",
        "subject_id": "bob",
        "text": "Bob prefers answers in English, short and to the point.",
        "tags": ["preference"],
    },
    # A workspace fact: every agent of the tenant reads it.
    {
        "category": "workspace",
        "text": "Release freeze starts every Thursday at 18:00 UTC.",
        "tags": ["release"],
    },
    # Inferred, not certain: waits in the review queue until an operator approves it.
    {
        "subject_id": "alice",
        "text": "Alice might be relocating to Lisbon.",
        "capture_mode": "inferred",
        "confidence": 0.6,
        "tags": ["location"],
    },
)

DEMO_THREAD = "support-42"
DEMO_MESSAGES = (
    ("user", "Hi, it's Alice again. Can you explain the March invoice?"),
    ("assistant", "Of course. The March invoice covers two seats from March 1 to March 31."),
    ("user", "Thanks. By the way, I may be moving to Lisbon this summer."),
    ("assistant", "Noted. Tell me when your billing address changes."),
)


class Command(BaseCommand):
    help = (
        "Create the demo tenant, operator and agent with a key, and a little data showing each "
        "concept. Secrets are printed once, when first created; later runs leave everything "
        "as it is."
    )

    def handle(self, *args: Any, **opts: Any) -> None:
        tenant = tenant_get_or_create(slug=DEMO_TENANT, name="Demo workspace")
        if not Membership.objects.for_tenant(tenant).filter(user__username=DEMO_EMAIL).exists():
            password = secrets.token_urlsafe(12)
            operator_create(tenant=tenant, email=DEMO_EMAIL, password=password, role="owner")
            self.stdout.write(f"Console operator: {DEMO_EMAIL} / {password}  (shown once)")
        else:
            self.stdout.write(
                f"Console operator: {DEMO_EMAIL} (password shown on the first run; a new one: "
                f"python manage.py create_operator --email {DEMO_EMAIL} --reset-password)"
            )
        is_new = not Agent.objects.for_tenant(tenant).filter(slug=DEMO_AGENT).exists()
        agent = agent_get_or_create(tenant=tenant, slug=DEMO_AGENT, name="Demo agent")
        if is_new or not agent.api_keys.exists():
            _, raw = api_key_create(
                tenant=tenant,
                agent=agent,
                scopes=["read", "write", "admin"],
                name="demo",
                created_by="command:seed_demo",
            )
            self.stdout.write(f"API key for {DEMO_TENANT}/{DEMO_AGENT} (shown once):")
            self.stdout.write(f"  export MEMORYHUB_KEY={raw}")
        else:
            self.stdout.write(
                f"Agent {DEMO_TENANT}/{DEMO_AGENT} has a key already (a new one: python "
                f"manage.py create_api_key --tenant {DEMO_TENANT} --agent {DEMO_AGENT} "
                "--scope read --scope write --scope admin)"
            )
        if not agent.memories.exists():
            seed_memories(tenant, agent)
            self.stdout.write(
                f"Stored {len(DEMO_MEMORIES)} demo memories and a conversation ({DEMO_THREAD})"
            )


def seed_memories(tenant: Tenant, agent: Agent) -> None:
    """Store the demo memories and hand over the demo conversation, through the same services
    the API uses."""
    principal = Principal(tenant=tenant, agent=agent)
    for data in DEMO_MEMORIES:
        memory_store(principal=principal, data={**data, "dedup_policy": "insert"})
    thread_messages_add(
        principal=principal,
        thread_id=DEMO_THREAD,
        data={
            "subject_id": "alice",
            "messages": [{"role": role, "content": text} for role, text in DEMO_MESSAGES],
        },
    )

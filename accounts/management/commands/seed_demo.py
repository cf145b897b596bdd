import secrets

from django.core.management.base import BaseCommand

from accounts.models import Agent, Membership
from accounts.principal import Principal
from accounts.services import (
    agent_get_or_create,
    api_key_create,
    operator_create,
    tenant_get_or_create,
)
from memories.services.store import memory_store

DEMO_TENANT, DEMO_EMAIL, DEMO_AGENT = "demo", "admin@example.com", "demo-agent"


class Command(BaseCommand):
    help = (
        "Create the demo tenant, operator and agent with a key. Secrets are printed once, "
        "when first created; later runs leave everything as it is."
    )

    def handle(self, *args, **opts):
        tenant = tenant_get_or_create(slug=DEMO_TENANT, name="Demo workspace")
        if not Membership.objects.for_tenant(tenant).filter(user__username=DEMO_EMAIL).exists():
            password = secrets.token_urlsafe(12)
            operator_create(tenant=tenant, email=DEMO_EMAIL, password=password, role="owner")
            self.stdout.write(f"Console operator: {DEMO_EMAIL} / {password}  (shown once)")
        else:
            self.stdout.write(f"Console operator: {DEMO_EMAIL} (password shown on the first run)")
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
            self.stdout.write(f"API key for {DEMO_TENANT}/{DEMO_AGENT}: {raw}  (shown once)")
        else:
            self.stdout.write(
                f"Agent {DEMO_TENANT}/{DEMO_AGENT} has a key already "
                "(create another with manage.py create_api_key)"
            )
        if not agent.memories.exists():
            seed_memories(tenant, agent)
            self.stdout.write(f"Stored {len(DEMO_MEMORIES)} demo memories")


# A few memories so the console has something to show on a fresh install.
DEMO_MEMORIES = (
    {"key": "user.name", "text": "The user's name is Ada.", "tags": ["profile"]},
    {"text": "Prefers answers in short bullet points.", "kind": "preference"},
    {"text": "Release freeze starts every Thursday at 18:00 UTC.", "category": "workspace"},
    {"text": "Asked about the March invoice today.", "category": "daily", "tags": ["billing"]},
    {"text": "Might be relocating to Lisbon.", "capture_mode": "inferred"},
)


def seed_memories(tenant, agent) -> None:
    """Store the demo memories through the same service the API uses."""
    principal = Principal(tenant=tenant, agent=agent)
    for data in DEMO_MEMORIES:
        memory_store(principal=principal, data=dict(data))

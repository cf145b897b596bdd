"""Small factories for tests (they call the same services as commands and the console)."""

from __future__ import annotations

from accounts.models import Agent, ApiKey, Membership, Tenant
from accounts.services import (
    agent_get_or_create,
    api_key_create,
    operator_create,
    tenant_get_or_create,
)

TEST_PASSWORD = "correct-horse-battery-staple"


def seed_synthetic(tenant: Tenant, agents: list[Agent], count: int, **options) -> None:
    """`count` of the bench's synthetic memories for each agent (its workspace ones the
    tenant's), by COPY: a table of some size, for tests of what the planner does with it.
    `options`: `latency.seed_agent`'s (`kind`, `data`)."""
    import io

    from bench import latency
    from bench.server import Progress

    for index, owner in enumerate(agents):
        latency.seed_agent(
            tenant_id=tenant.pk,
            agent_id=owner.pk,
            agent_index=index,
            count=count,
            progress=Progress("seeding", count, stream=io.StringIO()),
            **options,
        )


def make_tenant(slug: str = "acme") -> Tenant:
    return tenant_get_or_create(slug=slug)


def make_agent(tenant: Tenant, slug: str = "support-bot", **policy) -> Agent:
    agent = agent_get_or_create(tenant=tenant, slug=slug)
    if policy:
        for name, value in policy.items():
            setattr(agent, name, value)
        agent.save()
    return agent


def make_key(
    agent: Agent, scopes=("read", "write"), subject_id: str | None = None, expires_in=None
) -> tuple[ApiKey, str]:
    return api_key_create(
        tenant=agent.tenant,
        agent=agent,
        scopes=list(scopes),
        subject_id=subject_id,
        expires_in=expires_in,
    )


def make_operator(
    tenant: Tenant, email: str, role: str = "owner", password: str = TEST_PASSWORD
) -> Membership:
    return operator_create(tenant=tenant, email=email, password=password, role=role)


def asgi_http_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]], query_string: bytes = b""
) -> dict:
    """An ASGI HTTP scope for driving `memoryhub.asgi.application` directly in a test."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def asgi_lifespan() -> list[str]:
    """One web process's lifespan through `memoryhub.asgi.application`: start-up, then
    shut-down; the types of the messages the app sent back."""
    import asyncio

    from memoryhub.asgi import application

    pending = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[str] = []

    async def receive():
        return pending.pop(0)

    async def send(message):
        sent.append(message["type"])

    asyncio.run(application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send))
    return sent


def asgi_request(app, scope: dict, body: bytes = b"") -> list[dict]:
    """The messages `app` sends for one HTTP request with `scope` and a whole `body` (then the
    client goes away)."""
    import asyncio

    pending = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict] = []

    async def receive():
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent

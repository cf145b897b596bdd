"""Console fixtures: operators of each role signed in, and memories stored through the services."""

from __future__ import annotations

import pytest
from django.test import Client

from accounts.principal import Principal
from memories.services.store import memory_store
from tests.factories import make_operator


def store(agent, text: str, **fields):
    """Store a memory as `agent` would through the API (same service, same rules)."""
    principal = Principal(
        tenant=agent.tenant, agent=agent, scopes=frozenset({"read", "write", "admin"})
    )
    data = {"text": text, "dedup_policy": "insert", **fields}
    return memory_store(principal=principal, data=data).memory


@pytest.fixture
def store_memory():
    return store


@pytest.fixture
def login():
    """login(user) → a Django test client with that operator signed in."""

    def build(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return build


@pytest.fixture
def admin_user(tenant):
    return make_operator(tenant, "admin@acme.test", "admin").user


@pytest.fixture
def owner_client(login, owner):
    return login(owner)


@pytest.fixture
def viewer_client(login, viewer):
    return login(viewer)


@pytest.fixture
def reviewer_client(login, reviewer):
    return login(reviewer)

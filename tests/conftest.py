"""Shared fixtures: every test runs against the embedded PostgreSQL (or DATABASE_URL).

Access tests use the three users of the house style: an owner of the tenant, a member with a
lesser role, and an outsider who belongs to another tenant.
"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent, make_key, make_operator, make_tenant
from tests.support.fake_llm import FakeLLM


@pytest.fixture
def tenant(db):
    return make_tenant("acme")


@pytest.fixture
def other_tenant(db):
    return make_tenant("globex")


@pytest.fixture
def agent(tenant):
    return make_agent(tenant, "support-bot")


@pytest.fixture
def api_key(agent):
    """Raw key with read+write scopes for `agent`."""
    _, raw = make_key(agent, scopes=["read", "write"])
    return raw


@pytest.fixture
def api_client(api_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_key}")
    return client


@pytest.fixture
def key_client():
    """Build an API client for any agent: key_client(agent, scopes=[...], subject_id=None)."""

    def build(agent, scopes=("read", "write"), subject_id=None):
        _, raw = make_key(agent, scopes=list(scopes), subject_id=subject_id)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        return client

    return build


@pytest.fixture
def owner(tenant):
    return make_operator(tenant, "owner@acme.test", "owner").user


@pytest.fixture
def viewer(tenant):
    return make_operator(tenant, "viewer@acme.test", "viewer").user


@pytest.fixture
def reviewer(tenant):
    return make_operator(tenant, "reviewer@acme.test", "reviewer").user


@pytest.fixture
def outsider(other_tenant):
    return make_operator(other_tenant, "outsider@globex.test", "owner").user


@pytest.fixture
def fake_llm(settings, monkeypatch):
    """The OpenAI-compatible stand-in server (tests/support/fake_llm.py), running for the test.

    MEMORYHUB_LLM_URL points at it, and the client's retry waits are recorded in
    `fake_llm.sleeps` instead of slept.
    """
    with FakeLLM.running() as server:
        settings.MEMORYHUB_LLM_URL = server.url
        monkeypatch.setattr("memories.formation.llm.backoff_sleep", server.sleeps.append)
        yield server

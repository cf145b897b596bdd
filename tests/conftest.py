"""Shared fixtures: every test runs against the embedded PostgreSQL (or DATABASE_URL).

Access tests use the three users of the house style: an owner of the tenant, a member with a
lesser role, and an outsider who belongs to another tenant.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent, make_key, make_operator, make_tenant
from tests.support.components import SKIP_PREFIX, find_component, skipped_component
from tests.support.fake_llm import FakeLLM


def pytest_collection_modifyitems(config, items):
    """`requires_component("prog", ...)`: skipped, named, when a program is not installed
    (tests/support/components.py)."""
    for item in items:
        for marker in item.iter_markers("requires_component"):
            for name in marker.args:
                if find_component(name) is None:
                    item.add_marker(pytest.mark.skip(reason=SKIP_PREFIX + name))


def pytest_terminal_summary(terminalreporter):
    """The tests skipped because a component is not installed, per component: a run that
    skipped them says so plainly, at its end."""
    missing: dict[str, list[str]] = defaultdict(list)
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        name = skipped_component(str(reason))
        if name is not None:
            missing[name].append(report.nodeid)
    if not missing:
        return
    terminalreporter.section("skipped: component not installed", sep="=", yellow=True)
    for name, nodeids in sorted(missing.items()):
        terminalreporter.write_line(f"{name} (.ci/run installs it): {len(nodeids)} skipped")
        for nodeid in sorted(nodeids):
            terminalreporter.write_line(f"  {nodeid}")


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

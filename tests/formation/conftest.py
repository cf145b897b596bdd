"""Fixtures of the formation tests: the thread's agent as a principal, and a model client on the
scripted stand-in (`fake_llm`) whose retry waits are recorded instead of slept."""

from __future__ import annotations

import pytest

from accounts.principal import Principal
from memories.formation.llm import LLMClient


@pytest.fixture
def principal(agent):
    return Principal(tenant=agent.tenant, agent=agent)


@pytest.fixture
def llm(fake_llm):
    return LLMClient(url=fake_llm.url, model="stand-in", timeout=5, sleep=fake_llm.sleeps.append)

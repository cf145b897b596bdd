"""Webhook deliveries to a real receiver on 127.0.0.1, at a fixed clock, of memories stored as
the agent would."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accounts.principal import Principal
from memories.services.store import memory_store
from tests.support.receivers import Receiver

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def receiver(settings):
    settings.MEMORYHUB_WEBHOOK_ALLOW_INSECURE = True
    settings.MEMORYHUB_WEBHOOK_TIMEOUT = 0.5
    receiver = Receiver()
    receiver.url = receiver.start()
    yield receiver
    receiver.stop()


def store(agent, text, **data):
    principal = Principal(tenant=agent.tenant, agent=agent)
    return memory_store(
        principal=principal, data={"text": text, "dedup_policy": "insert", **data}
    ).memory

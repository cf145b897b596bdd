"""Webhook deliveries to a real receiver on 127.0.0.1, at a fixed clock, of memories stored as
the agent would; dispatchers run side by side on threads of their own."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from django.db import connections
from django.utils import timezone

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


class Clock:
    """The time every dispatcher reads (`timezone.now`), moved by the test alone."""

    def __init__(self, now: datetime) -> None:
        self.now = now


@pytest.fixture
def clock(monkeypatch):
    clock = Clock(T0)
    monkeypatch.setattr(timezone, "now", lambda: clock.now)
    return clock


def store(agent, text, **data):
    principal = Principal(tenant=agent.tenant, agent=agent)
    return memory_store(
        principal=principal, data={"text": text, "dedup_policy": "insert", **data}
    ).memory


class Dispatcher(threading.Thread):
    """`run()` of the dispatcher on a thread (and a database connection) of its own; `counts`
    is what it returned, `error` what it raised."""

    def __init__(self, dispatch: Callable[[], dict], start_line: threading.Barrier | None = None):
        super().__init__(daemon=True)
        self.dispatch, self.start_line = dispatch, start_line
        self.counts: dict | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            if self.start_line is not None:
                self.start_line.wait(30)
            self.counts = self.dispatch()
        except BaseException as exc:  # reported by finish()
            self.error = exc
        finally:
            connections.close_all()

    def finish(self, timeout: float = 60) -> dict:
        self.join(timeout)
        assert not self.is_alive(), "the dispatcher did not end"
        if self.error is not None:
            raise self.error
        assert self.counts is not None
        return self.counts


def until(condition: Callable[[], bool], timeout: float = 10) -> bool:
    """Whether `condition` came true within `timeout` (polled: it is the database's state)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling a condition with a deadline, not waiting for time
    return True


def sent_ids(*receivers: Receiver) -> Counter:
    """How many times each delivery (its `MemoryHub-Delivery`) reached the receivers."""
    return Counter(r.headers["MemoryHub-Delivery"] for each in receivers for r in each.received)

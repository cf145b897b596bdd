"""Retries are safe: a store whose first attempts fail (the response lost after the write, a
503 with Retry-After, a 429 RATE_LIMITED) is retried with one Idempotency-Key, and exactly one
memory exists. Waits are recorded through the injected sleep, never slept."""

from __future__ import annotations

import pytest
from memoryhub_client import QuotaExceededError, RetryPolicy

from memories.models import Memory
from tests.support.flaky_proxy import FlakyProxy, envelope

JSON = {"Content-Type": "application/json"}
UNAVAILABLE = ("status", 503, {**JSON, "Retry-After": "7"}, envelope("BACKEND_UNAVAILABLE", "down"))
RATE_LIMITED = ("status", 429, {**JSON, "Retry-After": "3"}, envelope("RATE_LIMITED", "slow down"))


def test_a_failing_store_is_retried_and_stored_once(make_hub, live):
    plan = ["forward_then_drop", UNAVAILABLE, RATE_LIMITED]
    with FlakyProxy.running(live.url, plan) as proxy:
        result = make_hub(url=proxy.url).store("Met the customer in Porto", key="met")
    # Back-off after the dropped connection, then exactly the server's Retry-After each time.
    assert live.sleeps == [0.5, 7.0, 3.0]
    posts = [seen for seen in proxy.seen if seen[0] == "POST"]
    assert len(posts) == 4
    assert len({idem for _, _, idem in posts}) == 1 and posts[0][2]
    # The first attempt stored the memory; the last one was the replay of that response.
    rows = Memory.objects.filter(text="Met the customer in Porto")
    assert [row.id for row in rows] == [result.memory_id]
    assert (result.created, result.version) == (True, 1)


def test_an_unkeyed_store_is_not_duplicated_by_a_lost_response(make_hub, live):
    with FlakyProxy.running(live.url, ["forward_then_drop", "forward_then_drop"]) as proxy:
        result = make_hub(url=proxy.url).store("No key, no dedup", dedup_policy="insert")
    assert Memory.objects.filter(text="No key, no dedup").count() == 1
    assert result.memory_id == Memory.objects.get(text="No key, no dedup").id
    assert live.sleeps == [0.5, 1.0]


def test_retry_after_is_capped_and_backoff_is_exponential(make_hub, live):
    long_wait = (
        "status",
        503,
        {**JSON, "Retry-After": "3600"},
        envelope("BACKEND_UNAVAILABLE", "x"),
    )
    plan = [long_wait, "forward_then_drop", "forward_then_drop", "forward_then_drop"]
    policy = RetryPolicy(retries=4, backoff=0.25, max_backoff=1.0, max_retry_after=30, jitter=False)
    with FlakyProxy.running(live.url, plan) as proxy:
        assert make_hub(url=proxy.url, retry=policy).keys() == []
    assert live.sleeps == [30.0, 0.5, 1.0, 1.0]


def test_jitter_stays_within_the_backoff(make_hub, live):
    policy = RetryPolicy(retries=3, backoff=1.0, jitter=True)
    with FlakyProxy.running(live.url, ["forward_then_drop"] * 3) as proxy:
        make_hub(url=proxy.url, retry=policy).keys()
    assert len(live.sleeps) == 3
    assert all(0 <= wait <= cap for wait, cap in zip(live.sleeps, [1.0, 2.0, 4.0], strict=True))


def test_quota_exceeded_is_not_retried(make_hub, live):
    quota = ("status", 429, JSON, envelope("QUOTA_EXCEEDED", "full"))
    with FlakyProxy.running(live.url, [quota]) as proxy, pytest.raises(QuotaExceededError):
        make_hub(url=proxy.url).store("won't fit")
    assert live.sleeps == [] and len(proxy.seen) == 1

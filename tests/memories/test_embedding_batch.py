"""The local embedder's micro-batcher and query cache (memories/embedding_batch.py).

No sleeps: the fake model blocks on events, the test waits on the batcher's own condition for
requests to queue, and the clock is injected.
"""

from __future__ import annotations

import threading

import pytest

from memories.embedding_batch import MicroBatcher, VectorCache

TIMEOUT = 10  # seconds before a broken batcher fails the test instead of hanging it


class FakeModel:
    """Vectors that name their text; the first pass can be held until the test lets it go."""

    def __init__(self, hold_first: bool = False):
        self.calls: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold_first:
            self.release.set()

    def encode(self, texts: list[str]):
        self.calls.append(list(texts))
        if len(self.calls) == 1:
            self.entered.set()
            assert self.release.wait(TIMEOUT)
        return [[f"v:{text}"] for text in texts]


class Clock:
    def __init__(self):
        self.now = 100.0
        self.reads = 0
        self._read = threading.Condition()

    def __call__(self) -> float:
        with self._read:
            self.reads += 1
            self._read.notify_all()
        return self.now

    def wait_reads(self, count: int, timeout: float) -> bool:
        """Wait (on a condition, not a sleep) until the clock has been read `count` times."""
        with self._read:
            return self._read.wait_for(lambda: self.reads >= count, timeout)


def start(batcher: MicroBatcher, texts: list[str], results: dict) -> threading.Thread:
    def call():
        results[texts[0]] = batcher.embed(texts)

    thread = threading.Thread(target=call)
    thread.start()
    return thread


def one_running_one_queued(batcher: MicroBatcher, model: FakeModel, results: dict):
    """ "first" in a pass the model holds, "second" queued behind it: their threads."""
    first = start(batcher, ["first"], results)
    assert model.entered.wait(TIMEOUT)
    second = start(batcher, ["second"], results)
    assert batcher.wait_pending(1, TIMEOUT)
    return first, second


def test_a_lone_call_runs_at_once_without_reading_the_clock_or_waiting():
    model, clock = FakeModel(), Clock()
    batcher = MicroBatcher(model.encode, window=3600.0, clock=clock)  # an hour's window
    assert batcher.embed(["alone"]) == [["v:alone"]]
    assert batcher.embed(["again", "two"]) == [["v:again"], ["v:two"]]
    assert model.calls == [["alone"], ["again", "two"]]
    assert clock.reads == 0  # the window was never opened: no wait at all
    assert batcher.pending() == 0


def test_calls_that_arrive_during_a_pass_share_the_next_one_and_get_their_own_vectors():
    model = FakeModel(hold_first=True)
    batcher = MicroBatcher(model.encode)
    results: dict = {}
    first = start(batcher, ["first"], results)
    assert model.entered.wait(TIMEOUT)  # the first pass is running (and held)
    waiting = [start(batcher, [name], results) for name in ("a", "b")]
    waiting.append(start(batcher, ["c", "d"], results))
    assert batcher.wait_pending(3, TIMEOUT)
    model.release.set()
    for thread in [first, *waiting]:
        thread.join(TIMEOUT)
    assert model.calls[0] == ["first"]
    assert len(model.calls) == 2 and sorted(model.calls[1]) == ["a", "b", "c", "d"]
    assert batcher.passes == 2
    assert results == {
        "first": [["v:first"]],
        "a": [["v:a"]],
        "b": [["v:b"]],
        "c": [["v:c"], ["v:d"]],
    }
    assert batcher.pending() == 0
    assert batcher.embed(["later"]) == [["v:later"]]  # idle again: runs at once


def test_a_pass_takes_at_most_max_batch_texts_and_the_rest_follow():
    model = FakeModel(hold_first=True)
    batcher = MicroBatcher(model.encode, max_batch=2)
    results: dict = {}
    threads = [start(batcher, ["first"], results)]
    assert model.entered.wait(TIMEOUT)
    for name in ("a", "b", "c"):
        threads.append(start(batcher, [name], results))
        assert batcher.wait_pending(len(threads) - 1, TIMEOUT)  # queued in this order
    model.release.set()
    for thread in threads:
        thread.join(TIMEOUT)
    assert model.calls == [["first"], ["a", "b"], ["c"]]
    assert results["c"] == [["v:c"]]


def test_a_failed_pass_fails_each_of_its_callers_and_the_next_pass_still_runs():
    entered, release = threading.Event(), threading.Event()
    calls = []

    def encode(texts):
        calls.append(list(texts))
        if len(calls) == 1:
            entered.set()
            assert release.wait(TIMEOUT)
            return [[0.0]]
        if len(calls) == 2:
            raise RuntimeError("model broke")
        return [[1.0] for _ in texts]

    batcher = MicroBatcher(encode)
    errors: list = []

    def call(name):
        try:
            batcher.embed([name])
        except RuntimeError as exc:
            errors.append((name, str(exc)))

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert entered.wait(TIMEOUT)
    followers = [threading.Thread(target=call, args=(n,)) for n in ("a", "b")]
    for thread in followers:
        thread.start()
    assert batcher.wait_pending(2, TIMEOUT)
    release.set()
    for thread in [first, *followers]:
        thread.join(TIMEOUT)
    assert sorted(errors) == [("a", "model broke"), ("b", "model broke")]
    assert batcher.embed(["after"]) == [[1.0]]


def test_a_leader_after_a_queue_waits_up_to_the_window_for_company():
    """The queued request that leads the next pass waits, for as long as its window lasts by
    the clock, for requests that come later: they all share its pass. A batcher that never
    waits runs them apart, one that stops at the first arrival leaves the last one out."""
    model, clock = FakeModel(hold_first=True), Clock()
    batcher = MicroBatcher(model.encode, window=60.0, clock=clock)
    results: dict = {}
    first, second = one_running_one_queued(batcher, model, results)
    model.release.set()
    # "second" leads now: it reads the clock for its deadline and for the time left, then
    # waits on the batcher's condition (a request can only queue once it does).
    assert clock.wait_reads(2, TIMEOUT)
    clock.now += 30.0  # half the window gone (by the clock; nobody really waits it)
    third = start(batcher, ["third"], results)
    assert clock.wait_reads(3, TIMEOUT)  # woken by "third", it found time left and waits on
    clock.now += 30.0  # the window's end
    fourth = start(batcher, ["fourth"], results)
    for thread in (first, second, third, fourth):
        thread.join(TIMEOUT)
    assert model.calls == [["first"], ["second", "third", "fourth"]]
    assert results == {
        "first": [["v:first"]],
        "second": [["v:second"]],
        "third": [["v:third"]],
        "fourth": [["v:fourth"]],
    }
    assert batcher.pending() == 0


def test_a_leader_whose_window_is_over_runs_with_what_is_queued():
    model, clock = FakeModel(hold_first=True), Clock()
    batcher = MicroBatcher(model.encode, window=0.002, clock=clock)
    results: dict = {}
    first, second = one_running_one_queued(batcher, model, results)
    clock.now += 1.0  # the window is long over by the time the next leader looks
    model.release.set()
    for thread in (first, second):
        thread.join(TIMEOUT)
    assert model.calls == [["first"], ["second"]]
    assert clock.reads >= 2  # the window was opened (and found closed) for the queued leader


def test_the_vector_cache_keeps_the_last_texts():
    cache = VectorCache(2)
    cache.put("a", [1.0])
    cache.put("b", [2.0])
    assert cache.get("a") == [1.0]  # a is now the most recent
    cache.put("c", [3.0])
    assert cache.get("b") is None and cache.get("a") == [1.0] and cache.get("c") == [3.0]
    assert (cache.hits, cache.misses) == (3, 1)
    off = VectorCache(0)
    off.put("a", [1.0])
    assert off.get("a") is None


@pytest.mark.parametrize("size", [1, 3])
def test_a_cached_vector_is_a_copy(size):
    cache = VectorCache(size)
    cache.put("a", [1.0, 2.0])
    got = cache.get("a")
    got[0] = 9.0
    assert cache.get("a") == [1.0, 2.0]

"""Per-process helpers of the local embedder: a micro-batcher and a small LRU of query vectors.

`MicroBatcher` turns the texts of concurrent requests into one forward pass. A request that
finds the model idle runs at once, alone: it never waits for company. Requests that arrive
while a pass is under way queue up; when the pass ends, the oldest of them leads the next
pass, which takes every queued request (up to `max_batch` texts) at once. With `window` > 0
that leader first waits up to `window` seconds for more requests to join (only ever after a
queue formed, so a lone request is still never delayed). Each caller gets its own vectors, or
the exception of the pass it was part of.

`VectorCache` remembers the vectors of the last `size` single texts embedded (search queries:
an agent asks the same thing again); a vector is a function of its text, so a hit is the same
vector the model would give.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence


class _Request:
    __slots__ = ("done", "error", "lead", "texts", "vectors")

    def __init__(self, texts: list[str]):
        self.texts = texts
        self.done = threading.Event()
        self.lead = False  # handed the next pass rather than a result
        self.vectors: Sequence | None = None
        self.error: BaseException | None = None


class MicroBatcher:
    def __init__(
        self,
        encode: Callable[[list[str]], Sequence],
        *,
        max_batch: int = 64,
        window: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.encode = encode
        self.max_batch = max_batch
        self.window = window
        self.clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a request queued
        self._queue: list[_Request] = []
        self._busy = False  # a pass (or its leader's window) is under way
        self.passes = 0  # forward passes run (diagnostics and tests)

    def embed(self, texts: list[str]) -> Sequence:
        request = _Request(list(texts))
        with self._lock:
            self._queue.append(request)
            self._changed.notify_all()
            lead = not self._busy
            self._busy = True
        if not lead:
            request.done.wait()
            if not request.lead:
                return self._result(request)
            self._gather()
        return self._run(request)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def wait_pending(self, count: int, timeout: float) -> bool:
        """Wait (on the condition, not a sleep) until `count` requests are queued."""
        with self._changed:
            return self._changed.wait_for(lambda: len(self._queue) >= count, timeout)

    def _gather(self) -> None:
        """A leader after a queue formed: let more requests join for up to `window`."""
        if self.window <= 0:
            return
        deadline = self.clock() + self.window
        with self._changed:
            while self._texts_queued() < self.max_batch:
                left = deadline - self.clock()
                if left <= 0 or not self._changed.wait(left):
                    break

    def _texts_queued(self) -> int:
        return sum(len(r.texts) for r in self._queue)

    def _take(self, leader: _Request) -> list[_Request]:
        """The leader's request and those queued behind it, up to `max_batch` texts."""
        with self._lock:
            batch: list[_Request] = []
            size = 0
            for request in self._queue:
                if batch and size + len(request.texts) > self.max_batch:
                    break
                batch.append(request)
                size += len(request.texts)
            # One leader at a time, and it is the oldest request: the head of the queue.
            assert batch[0] is leader
            del self._queue[: len(batch)]
            return batch

    def _run(self, leader: _Request) -> Sequence:
        batch = self._take(leader)
        texts = [text for request in batch for text in request.texts]
        try:
            vectors = self.encode(texts)
            self.passes += 1
        except BaseException as exc:  # noqa: BLE001 - each caller gets the pass's failure
            for request in batch:
                request.error = exc
        else:
            start = 0
            for request in batch:
                request.vectors = vectors[start : start + len(request.texts)]
                start += len(request.texts)
        with self._lock:
            if self._queue:
                successor = self._queue[0]
                successor.lead = True
                successor.done.set()
            else:
                self._busy = False
        for request in batch:
            if request is not leader:
                request.done.set()
        return self._result(leader)

    @staticmethod
    def _result(request: _Request) -> Sequence:
        if request.error is not None:
            raise request.error
        return request.vectors  # type: ignore[return-value]  # set when there is no error


class VectorCache:
    """A thread-safe LRU of text → vector (`size` 0: off)."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, text: str) -> list[float] | None:
        if self.size <= 0:
            return None
        with self._lock:
            vector = self._items.get(text)
            if vector is None:
                self.misses += 1
                return None
            self._items.move_to_end(text)
            self.hits += 1
            return list(vector)

    def put(self, text: str, vector: list[float]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[text] = tuple(vector)
            self._items.move_to_end(text)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

"""Syncing through the list (docs/api.md#syncing-without-missing-a-write): a write still in
flight when a walk began is stamped after the walk's `as_of`, so the next sync from `as_of`
has it, however late it commits."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connections
from rest_framework.test import APIClient

from memories.services import store as store_service
from tests.support.memories import store

PAUSE = 10  # seconds a paused side waits at most for the other (never reached when it passes)


def walk(client: APIClient, **params) -> tuple[list[dict], str]:
    """Every page of a list walk: its memories, in order, and the `as_of` its pages carry."""
    memories, as_of, cursor = [], None, None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        response = client.get("/api/v1/memories", query)
        assert response.status_code == 200, response.content
        body = response.json()
        memories += body["memories"]
        if "as_of" in body:
            assert as_of in (None, body["as_of"])  # one walk, one as_of
            as_of = body["as_of"]
        else:  # a client of the API before `as_of`: the newest `updated_at` it saw
            as_of = max((m["updated_at"] for m in memories), default=None)
        cursor = body["next_cursor"]
        if cursor is None:
            return memories, as_of


class PausedStore:
    """A store through the service in another thread, held in its transaction after its rows
    are written (stamped, not committed) until `commit()`."""

    def __init__(self, monkeypatch, agent, text: str, **fields):
        self.written, self.release, self.done = (threading.Event() for _ in range(3))
        self.result: dict = {}
        write = store_service._store_write

        def paused(prepared):
            result = write(prepared)
            self.written.set()
            assert self.release.wait(PAUSE)
            return result

        monkeypatch.setattr(store_service, "_store_write", paused)

        def run():
            try:
                self.result["memory"] = store(agent, text, **fields)
            finally:
                connections.close_all()
                self.done.set()

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.written.wait(PAUSE)
        monkeypatch.setattr(store_service, "_store_write", write)  # other stores run freely

    def commit(self):
        self.release.set()
        assert self.done.wait(PAUSE)
        self.thread.join()
        return self.result["memory"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("limit", [1, 50], ids=["walk-of-pages", "one-page"])
def test_a_store_committed_after_a_sync_read_is_in_the_next_sync(
    monkeypatch, agent, api_client, limit
):
    before = store(agent, "before the sync")
    # A workspace memory: another owner, so no cap lock is shared with the other stores.
    late = PausedStore(monkeypatch, agent, "committed late", category="workspace")
    after = store(agent, "stored and committed while the late one is in flight")

    first, as_of = walk(api_client, limit=limit)
    first_ids = {m["id"] for m in first}
    assert before.pk in first_ids and late.result == {}

    late_memory = late.commit()
    second, _ = walk(api_client, limit=limit, updated_after=as_of)
    synced = first_ids | {m["id"] for m in second}
    assert synced == {before.pk, late_memory.pk, after.pk}
    assert before.pk not in {m["id"] for m in second}  # the next sync starts where it ended


@pytest.mark.django_db(transaction=True)
def test_pages_carry_the_walks_as_of_and_it_is_now_when_nothing_is_in_flight(agent, api_client):
    for i in range(3):
        store(agent, f"fact {i}")
    first = api_client.get("/api/v1/memories", {"limit": 2}).json()
    second = api_client.get("/api/v1/memories", {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert first["as_of"] == second["as_of"]
    assert len(first["memories"]) + len(second["memories"]) == 3  # nothing in flight: all


@pytest.mark.django_db(transaction=True)
def test_syncs_with_concurrent_writers_miss_nothing_and_repeat_nothing(
    agent, api_client, key_client
):
    """Writers store and edit while a reader syncs over and over (walk of small pages, then
    `updated_after=<as_of>`): at the end the reader's copy equals the database, and no walk
    returned a memory twice."""
    rng = random.Random(47)
    seeded = [store(agent, f"seed {i}").pk for i in range(6)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(seed: int) -> Callable[[], None]:
        client = key_client(agent)

        def run():
            local = random.Random(seed)
            try:
                for n in range(12):
                    if stop.is_set():
                        return
                    if local.random() < 0.6:
                        store(agent, f"writer {seed} fact {n}")
                    else:
                        target = local.choice(seeded)
                        client.patch(
                            f"/api/v1/memories/{target}",
                            {"text": f"edit {seed}.{n}"},
                            format="json",
                        )
            except BaseException as exc:  # reported by the test, not lost in the thread
                errors.append(exc)
            finally:
                connections.close_all()

        return run

    writers = [threading.Thread(target=writer(seed)) for seed in range(3)]
    for thread in writers:
        thread.start()
    copy: dict[str, dict] = {}
    as_of = None
    deadline = time.monotonic() + 60
    try:
        while any(t.is_alive() for t in writers) and time.monotonic() < deadline:
            params = {"limit": rng.choice([1, 2, 3])}
            if as_of:
                params["updated_after"] = as_of
            memories, as_of = walk(api_client, **params)
            ids = [m["id"] for m in memories]
            assert len(ids) == len(set(ids))
            for memory in memories:
                copy[memory["id"]] = memory
    finally:
        stop.set()
        for thread in writers:
            thread.join(PAUSE * 3)
    assert not errors
    memories, _ = walk(api_client, limit=3, updated_after=as_of)
    for memory in memories:
        copy[memory["id"]] = memory
    truth = {m["id"]: m for m in walk(api_client, limit=200)[0]}
    assert set(copy) == set(truth)
    assert {i: m["version"] for i, m in copy.items()} == {i: m["version"] for i, m in truth.items()}

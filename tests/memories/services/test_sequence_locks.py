"""Writers into one sequence (memories of one owner, subject and thread) take its
advisory lock before any row lock, so a change racing an insert into the same thread waits
instead of deadlocking. Real PostgreSQL, two transactions on connections of their own.

The race, held open deterministically: an inserter holds the sequence's lock (its first turn is
in) and is about to insert a turn next to memory A; a change of A starts and is made to wait for
the sequence's lock; then the inserter goes on. Had the change locked A's row before waiting,
the inserter's refresh of A's links would wait for it in turn: a deadlock.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection, connections, transaction

from accounts.principal import Principal
from memories.formation.thread_actions import thread_end
from memories.jobs.prune import prune_memories
from memories.models import Memory
from memories.services.changes import memory_confirm, memory_update
from memories.services.lifecycle import memory_forget
from memories.services.operator_actions import memory_correct, memory_restore
from memories.services.sequences import SEQUENCE_KEY_SQL, sequence_key
from memories.services.store import memory_store
from tests.support.locks import waiting_for_a_lock

pytestmark = pytest.mark.django_db(transaction=True)

T0 = datetime(2026, 5, 8, 13, 0, tzinfo=UTC)
THREAD = "session-7"


def _turn(principal: Principal, text: str, seconds: int, **fields) -> Memory:
    body = {
        "text": text,
        "thread_id": THREAD,
        "occurred_at": (T0 + timedelta(seconds=seconds)).isoformat(),
        "dedup_policy": "insert",
        "category": "archival",
        **fields,
    }
    return memory_store(principal=principal, data=body, now=T0).memory


def race_an_insert(principal: Principal, a: Memory, write: Callable[[], object]) -> list:
    """Run `write` (a change of `a`) against an insert next to `a` in its thread: the inserter
    holds the sequence's lock until the change waits for a lock (the sequence's, or the owner's
    counter row the inserter also holds), then inserts next to `a`. Returns the errors raised."""
    errors: list[BaseException] = []
    holding, change_waits, change_pid = threading.Event(), threading.Event(), []

    def inserter() -> None:
        try:
            with transaction.atomic():
                _turn(principal, "Ben: and then the ferry", 30)  # holds the sequence's lock
                holding.set()
                assert change_waits.wait(timeout=30)
                _turn(principal, "Ana: just before A", 5)  # its refresh rewrites A's links
        except BaseException as exc:  # reported to the test's thread
            errors.append(exc)
        finally:
            holding.set()
            connections.close_all()

    def changer() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                change_pid.append(cursor.fetchone()[0])
            assert holding.wait(timeout=30)
            write()
        except BaseException as exc:
            errors.append(exc)
        finally:
            change_pid.append(None)
            connections.close_all()

    threads = [threading.Thread(target=inserter), threading.Thread(target=changer)]
    threads[0].start()
    assert holding.wait(timeout=30)
    threads[1].start()
    deadline = time.monotonic() + 30
    while not change_pid or not waiting_for_a_lock(change_pid[0]):
        if change_pid[-1:] == [None] or time.monotonic() > deadline:
            break  # the change ended without waiting: nothing left to hold open
        time.sleep(0.01)  # polling a condition (the change queued on a lock), not timing
    change_waits.set()
    for thread in threads:
        thread.join(timeout=60)
    return errors


@pytest.fixture
def me(tenant, agent):
    return Principal(tenant=tenant, agent=agent)


@pytest.fixture
def a(me):
    """A (at 10 s) and C (at 20 s) in one thread; the race inserts at 30 s, then at 5 s."""
    memory = _turn(me, "Ana: we took the night train to Vienna", 10)
    _turn(me, "Ben: how long did it take?", 20)
    return memory


def _order() -> list[str]:
    rows = Memory.objects.filter(thread_id=THREAD, status="active").order_by("occurred_at")
    return [m.text for m in rows]


def _assert_links_follow_the_order() -> None:
    rows = list(Memory.objects.filter(thread_id=THREAD, status="active").order_by("occurred_at"))
    for before, after in itertools.pairwise(rows):
        assert (before.next_id, after.prev_id) == (after.pk, before.pk)
    assert rows[0].prev_id is None and rows[-1].next_id is None


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(
            lambda me, a: memory_update(
                principal=me, memory_id=a.pk, data={"text": "Ana: the sleeper to Vienna"}
            ),
            id="patch-text",
        ),
        pytest.param(
            lambda me, a: memory_update(
                principal=me, memory_id=a.pk, data={"occurred_at": T0.isoformat()}
            ),
            id="patch-occurred-at",
        ),
        pytest.param(lambda me, a: memory_confirm(principal=me, memory_id=a.pk), id="confirm"),
        pytest.param(
            lambda me, a: memory_forget(principal=me, memory_id=a.pk, reason="wrong"),
            id="forget",
        ),
        pytest.param(
            lambda me, a: memory_forget(
                principal=Principal(tenant=me.tenant, agent=me.agent, scopes=frozenset({"admin"})),
                memory_id=a.pk,
                purge=True,
            ),
            id="purge",
        ),
        pytest.param(
            lambda me, a: memory_correct(
                tenant=me.tenant,
                memory_id=a.pk,
                actor="operator:o@acme.test",
                changes={"text": "Ana: the night train to Wien"},
                expected_version=a.version,
            ),
            id="operator-correct",
        ),
    ],
)
def test_a_change_racing_an_insert_into_its_thread_waits_instead_of_deadlocking(me, a, write):
    errors = race_an_insert(me, a, lambda: write(me, a))

    assert errors == []
    assert Memory.objects.get(pk=a.pk).version == 2
    _assert_links_follow_the_order()


def test_a_restore_racing_an_insert_waits_instead_of_deadlocking(me, a):
    memory_forget(principal=me, memory_id=a.pk)

    errors = race_an_insert(
        me, a, lambda: memory_restore(tenant=me.tenant, memory_id=a.pk, actor="operator:o")
    )

    assert errors == []
    assert Memory.objects.get(pk=a.pk).status == "active"
    assert _order()[:2] == ["Ana: just before A", "Ana: we took the night train to Vienna"]
    _assert_links_follow_the_order()


def test_a_thread_end_racing_an_insert_waits_instead_of_deadlocking(me):
    a = _turn(me, "Ana: we took the night train to Vienna", 10, category="conversation")
    _turn(me, "Ben: how long did it take?", 20)

    errors = race_an_insert(me, a, lambda: thread_end(principal=me, thread_id=THREAD))

    assert errors == []
    assert Memory.objects.get(pk=a.pk).status == "expired"
    _assert_links_follow_the_order()


def test_a_prune_racing_an_insert_skips_the_busy_thread_instead_of_deadlocking(me):
    a = _turn(me, "Ana: we took the night train to Vienna", 10, category="conversation")
    _turn(me, "Ben: how long did it take?", 20)
    later = T0 + timedelta(days=2)  # A's conversation has been idle 24 h and more
    counts = []

    errors = race_an_insert(me, a, lambda: counts.append(prune_memories(now=later)))

    assert errors == []
    _assert_links_follow_the_order()
    # The busy thread was left for the next run, which takes A.
    if counts[0]["conversation_ended"] == 0:
        assert prune_memories(now=later)["conversation_ended"] == 1
    assert Memory.objects.get(pk=a.pk).status == "expired"
    _assert_links_follow_the_order()


def test_the_sequence_key_is_the_one_the_triggers_lock(me, a):
    triggers = (Path(settings.BASE_DIR) / "memories" / "sql" / "memory_sequences.sql").read_text()
    # The insert's lock (NEW) and the update's (its new and old rows, n and o).
    for alias in ("NEW", "n", "o"):
        assert SEQUENCE_KEY_SQL.format(t=alias) in triggers, alias
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {SEQUENCE_KEY_SQL.format(t='m')} FROM memories_memory m WHERE id = %s",
            [a.pk],
        )
        in_sql = cursor.fetchone()[0]
    assert in_sql == sequence_key(a)
    assert sequence_key(Memory(tenant_id=1, thread_id=None)) is None

"""An extraction run's operations share one transaction; it takes the cap lock its adds need
before any operation locks a row, the order of an ordinary store (cap lock, then the sequence,
then rows), so a run racing a store of the same agent waits instead of deadlocking."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, connections, transaction

from accounts.principal import Principal
from memories.formation.llm import LLMClient
from memories.models import ExtractionRun, Memory
from memories.services.eviction import cap_lock_name
from memories.services.store import memory_store
from tests.support.formation import NOW, add_op, extract, ingest, update_op
from tests.support.locks import waiting_for_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def principal(agent):
    return Principal(tenant=agent.tenant, agent=agent)


@pytest.fixture
def llm(fake_llm):
    return LLMClient(url=fake_llm.url, model="stand-in", timeout=5)


def test_a_run_takes_the_cap_lock_before_it_locks_a_row(principal, tenant, agent, fake_llm, llm):
    a = memory_store(
        principal=principal, data={"text": "Works at Acme", "thread_id": "t-9"}, now=NOW
    ).memory
    ingest(principal, "I left Acme, now at Globex", "and I adopted a dog")
    fake_llm.queue_json(
        {
            "operations": [
                update_op(a.pk, "Works at Globex"),
                add_op("Adopted a dog", evidence=[2]),
            ]
        }
    )
    errors, pid = [], []

    def worker() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid.append(cursor.fetchone()[0])
            extract(principal, llm)
        except BaseException as exc:  # reported to the test's thread
            errors.append(exc)
        finally:
            pid.append(None)
            connections.close_all()

    with transaction.atomic():  # a store of the same agent, holding its cap lock
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                [cap_lock_name(tenant.pk, agent.pk)],
            )
        thread = threading.Thread(target=worker)
        thread.start()
        deadline = time.monotonic() + 30
        while not pid or not waiting_for_a_lock(pid[0]):
            assert pid[-1:] != [None], errors
            assert time.monotonic() < deadline
            time.sleep(0.01)  # polling a condition (the run queued on a lock), not timing
        with connection.cursor() as cursor:  # the run waits holding no row of the update
            cursor.execute("SELECT id FROM memories_memory WHERE id = %s FOR UPDATE NOWAIT", [a.pk])
    thread.join(timeout=60)
    assert not errors
    # (the run may have executed inside `run_request`: its enqueue runs at commit here)
    run = ExtractionRun.objects.get()
    assert {k: v for k, v in run.counts.items() if v} == {"updated": 1, "added": 1}
    assert Memory.objects.get(pk=a.pk).text == "Works at Globex"

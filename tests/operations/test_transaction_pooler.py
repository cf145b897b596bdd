"""`MEMORYHUB_DB_POOL_MODE=transaction` through a real PgBouncer in transaction mode whose
server connection forgets its session after every transaction
(docs/operations.md#behind-a-connection-pooler): runs are claimed once and released, a dead
holder's run is taken over once its lease expires, exports stream, kind changes reach MCP
listeners (polling, or LISTEN over the direct URL, across a dropped connection), and no code
path relies on session state (the SQL of each test is watched)."""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import timedelta

import psycopg
import pytest
from django.db import connection
from django.db.backends.signals import connection_created
from django.utils import timezone
from mcp.server.subscriptions import ToolsListChanged

from memories import run_liveness
from memories.formation import runs
from memories.formation.runs import run_execute
from memories.jsonl import export_jsonl, export_tenant
from memories.mcp.listen import APPLICATION_NAME
from memories.models import ExtractionRun, JobRun, Memory, RunLease, RunState, Thread
from memories.services import kind_changes
from memories.tasks import run_job
from tests.factories import make_key
from tests.support.formation import NOW, add_op, ingest
from tests.support.jobs import NOW as JOBS_NOW
from tests.support.jobs import add_memories, ago
from tests.support.mcp import listen_for_list_changes
from tests.support.pgbouncer import direct_query, direct_url

pytestmark = [
    pytest.mark.requires_component("pgbouncer"),
    pytest.mark.usefixtures("through_pgbouncer"),
]

SESSION_LOCK = re.compile(r"pg_(try_)?advisory_(un)?lock(_shared)?\s*\(", re.IGNORECASE)
SESSION_SET = re.compile(r"^\s*(SET|RESET)\s+(?!LOCAL\b)", re.IGNORECASE)


class SessionStateWatch:
    """Every statement of every connection opened during the test (any thread): those that
    would leave state in the session are recorded."""

    def __init__(self) -> None:
        self.violations: list[str] = []
        self.statements = 0

    def __call__(self, execute, sql, params, many, context):
        self.statements += 1
        conn = context["connection"]
        text = sql if isinstance(sql, str) else str(sql)
        if SESSION_LOCK.search(text):
            self.violations.append(f"session advisory lock: {text[:120]}")
        if SESSION_SET.search(text) and not conn.in_atomic_block:
            self.violations.append(f"SET outside a transaction: {text[:120]}")
        if isinstance(context["cursor"].cursor, psycopg.ServerCursor) and not conn.in_atomic_block:
            self.violations.append(f"server-side cursor outside a transaction: {text[:120]}")
        return execute(sql, params, many, context)

    def install(self, sender, connection, **kwargs) -> None:
        connection.execute_wrappers.append(self)


@pytest.fixture(autouse=True)
def session_state(through_pgbouncer):
    watch = SessionStateWatch()
    connection_created.connect(watch.install)
    yield watch
    connection_created.disconnect(watch.install)


def no_session_state_left(direct, watch: SessionStateWatch) -> None:
    assert watch.statements > 0
    assert watch.violations == []
    assert not RunLease.objects.exists()
    held = direct_query(
        direct,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
        "(SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    assert held == [(0,)]


def queued_run(thread: Thread) -> ExtractionRun:
    return ExtractionRun.objects.create(
        tenant=thread.tenant, thread=thread, agent=thread.agent, trigger="now"
    )


def at_once(*calls):
    """Run `calls` in threads started together; their results in order."""
    start = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def worker(index, call):
        from django.db import connections

        try:
            start.wait(timeout=30)
            results[index] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results[index] = exc
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


# --- runs ------------------------------------------------------------------------------------


def test_an_extraction_run_is_claimed_once_by_two_workers_and_released(
    through_pgbouncer, session_state, principal, fake_llm, llm
):
    ingest(principal, "I drink tea every morning")
    fake_llm.queue_json({"operations": [add_op("The user drinks tea every morning")]})
    run = queued_run(Thread.objects.get())

    results = at_once(*[lambda: run_execute(run.pk, llm=llm, now=NOW)] * 2)

    assert not any(isinstance(result, BaseException) for result in results), results
    assert sum(result is not None for result in results) == 1
    run.refresh_from_db()
    assert (run.state, run.attempts) == (RunState.DONE, 1)
    assert len(fake_llm.requests) == 1
    assert Memory.objects.filter(created_by="system:extract").count() == 1
    no_session_state_left(through_pgbouncer, session_state)


def test_a_job_run_at_work_is_left_alone_by_another_and_both_end(
    through_pgbouncer, session_state, tenant, agent
):
    add_memories(tenant, agent, 3, expires_at=ago(hours=1))
    seen: list[str] = []

    def progress(line: str) -> None:
        if not seen:
            seen.append("other")
            (other,) = at_once(lambda: run_job("prune_memories", now=JOBS_NOW))
            seen.append(other.status if isinstance(other, JobRun) else repr(other))
            seen.append(JobRun.objects.exclude(pk=other.pk).get().status)

    first = run_job("prune_memories", now=JOBS_NOW, progress=progress)

    # The other run started while the first worked, did not take it for abandoned, and ended.
    assert seen == ["other", "ok", "running"]
    assert first.status == "ok"
    assert list(JobRun.objects.values_list("status", flat=True)) == ["ok", "ok"]
    no_session_state_left(through_pgbouncer, session_state)


def test_a_dead_workers_run_is_taken_over_once_its_lease_expires(
    through_pgbouncer, session_state, settings, monkeypatch, principal, fake_llm, llm, tenant
):
    settings.MEMORYHUB_RUN_LEASE_SECONDS = 60
    ingest(principal, "I drink tea every morning")
    fake_llm.queue_json({"operations": [add_op("The user drinks tea every morning")]})
    run = queued_run(Thread.objects.get())
    # As a worker that died after its claim leaves it: running, leased, never released.
    dead = run_liveness.Liveness(runs._LIVENESS.namespace)
    assert dead.try_hold(run.pk)
    ExtractionRun.objects.filter(pk=run.pk).update(state=RunState.RUNNING, attempts=1)
    stale_job = JobRun.objects.create(job="prune_memories", status="running")
    from memories import tasks

    assert run_liveness.Liveness(tasks._LIVENESS.namespace).try_hold(stale_job.pk)
    start = timezone.now()

    monkeypatch.setattr(run_liveness, "clock", lambda: start + timedelta(seconds=59))
    assert run_execute(run.pk, llm=llm, now=NOW) is None  # the lease still runs
    assert runs.extract_due_threads(now=NOW) == 0  # not re-queued either
    run_job("prune_memories", now=NOW)
    assert JobRun.objects.get(pk=stale_job.pk).status == "running"

    assert dead.renew(run.pk)  # a holder's renewal: the term runs from now again
    monkeypatch.setattr(run_liveness, "clock", lambda: start + timedelta(seconds=61))
    assert run_execute(run.pk, llm=llm, now=NOW) is None

    monkeypatch.setattr(run_liveness, "clock", lambda: start + timedelta(seconds=120))
    taken = run_execute(run.pk, llm=llm, now=NOW)
    assert taken is not None
    assert (taken.state, taken.attempts) == (RunState.DONE, 2)
    assert len(fake_llm.requests) == 1
    assert not dead.renew(run.pk)  # the dead holder's lease is no longer its own
    run_job("prune_memories", now=NOW)
    stale_job.refresh_from_db()
    assert (stale_job.status, stale_job.error[:9]) == ("failed", "abandoned")
    no_session_state_left(through_pgbouncer, session_state)


# --- exports ---------------------------------------------------------------------------------


def test_the_exports_stream_through_the_pooler(
    through_pgbouncer, session_state, tenant, agent, api_client
):
    add_memories(tenant, agent, 7, text="exported fact")

    memories = Memory.objects.for_tenant(tenant)
    _header, *lines = "".join(export_jsonl(tenant, memories, chunk_size=2)).splitlines()
    tenant_file = "".join(export_tenant(tenant, chunk_size=2)).splitlines()
    response = api_client.get("/api/v1/export.md")
    markdown = b"".join(response.streaming_content).decode()

    assert len(lines) == 7
    assert sum('"type":"memory"' in line for line in tenant_file) == 7
    assert sorted(line.split('"text":"')[1].split('"')[0] for line in lines) == [
        f"exported fact {i}" for i in range(7)
    ]
    assert response.status_code == 200
    assert all(f"exported fact {i}" in markdown for i in range(7))
    assert markdown.rstrip().endswith("7 memories.")
    no_session_state_left(through_pgbouncer, session_state)


# --- kind changes over MCP -------------------------------------------------------------------


def register_kind(tenant, name: str) -> None:
    kind_changes.kind_save(
        tenant=tenant,
        name=name,
        data={"schema": {"type": "object", "properties": {"number": {"type": "string"}}}},
    )


def test_a_kind_change_reaches_an_mcp_listener_by_polling(
    through_pgbouncer, session_state, settings, asgi_server, agent
):
    settings.MEMORYHUB_DIRECT_DATABASE_URL = ""
    settings.MEMORYHUB_KINDS_POLL_SECONDS = 0.2
    _, raw = make_key(agent, scopes=["read", "write"])

    event, tools = asyncio.run(
        listen_for_list_changes(asgi_server, raw, [lambda: register_kind(agent.tenant, "Invoice")])
    )

    assert isinstance(event, ToolsListChanged)
    assert "create_invoice" in tools
    assert session_state.violations == []


def test_a_kind_change_reaches_an_mcp_listener_over_the_direct_url_across_a_drop(
    through_pgbouncer, session_state, settings, monkeypatch, asgi_server, agent
):
    settings.MEMORYHUB_DIRECT_DATABASE_URL = direct_url(through_pgbouncer)
    settings.MEMORYHUB_KINDS_POLL_SECONDS = 3600  # were it polling, nothing would come in time
    _, raw = make_key(agent, scopes=["read", "write"])
    connects, reconnecting, may_reconnect = [], threading.Event(), threading.Event()
    connect = psycopg.AsyncConnection.connect

    async def held_connect(cls, *args, **kwargs):
        connects.append(kwargs.get("conninfo"))
        if len(connects) > 1:  # the listener's reconnection waits for the test's change
            reconnecting.set()
            await asyncio.to_thread(may_reconnect.wait, 30)
        return await connect(*args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", classmethod(held_connect))

    def drop_then_change():
        direct_query(
            through_pgbouncer,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            [APPLICATION_NAME],
        )
        assert reconnecting.wait(30)
        register_kind(agent.tenant, "Receipt")  # while the listener is away
        may_reconnect.set()

    first, second, tools = asyncio.run(
        listen_for_list_changes(
            asgi_server,
            raw,
            [lambda: register_kind(agent.tenant, "Invoice"), drop_then_change],
        )
    )

    assert isinstance(first, ToolsListChanged) and isinstance(second, ToolsListChanged)
    assert {"create_invoice", "create_receipt"} <= tools
    assert set(connects) == {settings.MEMORYHUB_DIRECT_DATABASE_URL}
    assert len(connects) == 2
    assert session_state.violations == []
    assert connection.settings_dict["PORT"] != through_pgbouncer["PORT"]  # the rest: pooled

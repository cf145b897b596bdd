"""Moving a tenant to another instance (docs/operations.md#moving-a-tenant): a populated tenant
is exported by `manage.py export_tenant` from this run's database and imported by `manage.py
import_tenant` into a second database on the same server (the other instance, a fresh copy of
the migrated, empty test database), and the API answers the same on both.

The expensive part (populating, both commands, every API answer on both databases) is one
module-scoped fixture; the tests below each assert one part of it."""

from __future__ import annotations

import json
import re
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest
from django.db import connection, connections
from django.test.utils import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Agent, ApiKey, Tenant
from memories.formation.llm import LLMClient
from memories.formation.runs import run_execute, run_request
from memories.jsonl import export_tenant, memory_to_record
from memories.models import (
    ExtractionRun,
    Memory,
    MemoryRevision,
    MemoryVector,
    Message,
    Thread,
    WebhookEndpoint,
)
from memories.services.jsonl_import import ImportLineError
from memories.services.kind_changes import kind_save
from memories.services.operator_actions import memory_tombstone
from memories.services.policies import agent_policy_set, tenant_policy_set
from memories.services.tenant_import import ImportRefused, tenant_import
from memories.webhooks import signing
from memories.webhooks.endpoints import webhook_create
from tests.factories import make_agent, make_key, make_tenant, seed_synthetic
from tests.support.commands import command_env, start_command
from tests.support.fake_llm import FakeLLM
from tests.support.formation import add_op
from tests.support.memories import ingest, store

SLUG, MOVED = "moving-co", "moved-co"
QUERIES = ["tea", "office hours", "certificate renewal", "vpn setup", "vegan"]
HOOK_URL = "https://93.184.216.34/hooks/memoryhub"


# --- two databases -------------------------------------------------------------------------


def _admin_connection() -> psycopg.Connection:
    db = connection.settings_dict
    return psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        password=db["PASSWORD"] or None,
        dbname="postgres",
        autocommit=True,
    )


def _create_copy(name: str) -> None:
    """A new database on the same server, a copy of the migrated test database as it is now."""
    source = connection.settings_dict["NAME"]
    connections.close_all()
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')


def _drop(name: str) -> None:
    connections.close_all()
    with _admin_connection() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def on_database(name: str) -> Iterator[None]:
    """This process's `default` connection on database `name` for the block."""
    conn = connections["default"]
    saved = conn.settings_dict["NAME"]
    conn.close()
    conn.settings_dict["NAME"] = name
    try:
        yield
    finally:
        conn.close()
        conn.settings_dict["NAME"] = saved


def _run(*args: str, database: str | None = None):
    env = {}
    if database is not None:
        env["DATABASE_URL"] = command_env()["DATABASE_URL"].rsplit("/", 1)[0] + "/" + database
    process = start_command(*args, env=env)
    out, err = process.communicate(timeout=300)
    return SimpleNamespace(code=process.returncode, out=out, err=err)


# --- the tenant ----------------------------------------------------------------------------


def _populate(now) -> None:
    tenant = make_tenant(SLUG)
    tenant_policy_set(tenant=tenant, user_cap=400, max_retention={"core": 30 * 86400})
    kind_save(
        tenant=tenant,
        name="profile",
        data={
            "cardinality": "single",
            "description": "What a person's plan is",
            "schema": {
                "type": "object",
                "properties": {"plan": {"type": "string"}},
                "required": ["plan"],
            },
        },
    )
    bot, helper = make_agent(tenant, "support-bot"), make_agent(tenant, "helper")
    agent_policy_set(
        tenant=tenant,
        agent=bot,
        reads_from=["helper"],
        default_ttl=timedelta(days=200),
        hydration_budget_bytes=6000,
        max_retention={"daily": 48 * 3600},
    )
    hours = store(bot, "The office opens at 9", key="office-hours")
    for text in ("The office opens at 8:30", "The office opens at 8"):
        hours = store(bot, text, key="office-hours")
    store(bot, "Ann is on the pro plan", kind="profile", data={"plan": "pro"}, subject_id="ann")
    store(bot, "Ann is vegan", scope="user", subject_id="ann", key="diet")
    # Asked to live 90 days; the tenant keeps core memories 30 days: effective ≠ requested.
    store(bot, "Renew the TLS certificate", expires_at=(now + timedelta(days=90)).isoformat())
    gone = store(bot, "The VPN needs the old client")
    memory_tombstone(tenant=tenant, memory_id=gone.pk, actor="operator:ops@x.test", reason="old")
    store(helper, "The VPN setup uses WireGuard", tags=["it"])
    store(bot, "No deploys on Fridays", category="workspace")
    store(bot, "Standup notes for today", category="daily")
    for n in range(6):
        store(bot, f"Fact number {n} about tea and coffee", tags=[f"t{n}"])
    ingest(bot, "I drink green tea every morning", "Noted!", thread_id="t-1", subject_id="ann")
    with FakeLLM.running() as server, override_settings(MEMORYHUB_LLM_URL=server.url):
        server.queue_json({"operations": [add_op("The user drinks green tea every morning")]})
        llm = LLMClient(url=server.url, model="stand-in", timeout=5, sleep=lambda _: None)
        thread = Thread.objects.get(tenant=tenant, thread_id="t-1")
        # Outside a transaction the queued run may have been carried out at once (a
        # synchronous task queue): executing it again then finds it done already.
        run = run_request(thread=thread, trigger="now")
        run_execute(run.pk, llm=llm)
        run.refresh_from_db()
        assert run.state == "done", (run.state, run.error_message)
    webhook_create(tenant=tenant, url=HOOK_URL, events=["memory.created"], actor="operator:o")
    assert hours.version == 3


def _answers(slug: str) -> dict:
    """What the API answers about tenant `slug`, through a new key of each agent."""
    tenant = Tenant.objects.get(slug=slug)
    out: dict = {}
    for agent in Agent.objects.for_tenant(tenant).order_by("slug"):
        _, raw = make_key(agent, scopes=("read", "write"))
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
        walk, cursor = [], None
        while True:
            page = client.get(
                "/api/v1/memories", {"limit": 4, **({"cursor": cursor} if cursor else {})}
            ).json()
            walk.extend(page["memories"])
            cursor = page["next_cursor"]
            if not cursor:
                break
        by_key = {}
        for memory in walk:
            if memory["key"]:
                params = {"subject_id": memory["subject_id"]} if memory["subject_id"] else {}
                url = f"/api/v1/memories/by-key/{memory['key']}"
                by_key[(memory["key"], memory["subject_id"])] = client.get(url, params).json()
        searches = {
            query: [
                hit["id"]
                for hit in client.post("/api/v1/search", {"query": query}, format="json").json()[
                    "memories"
                ]
            ]
            for query in QUERIES
        }
        hydrate = client.post(
            "/api/v1/hydrate", {"query": "tea", "subject_id": "ann"}, format="json"
        ).json()
        export = client.get("/api/v1/export.md", {"include_tombstoned": "true"})
        thread = client.get("/api/v1/threads/t-1", {"subject_id": "ann"}).json()
        messages = client.get("/api/v1/threads/t-1/messages", {"subject_id": "ann"}).json()
        out[agent.slug] = {
            "walk": walk,
            "by_key": by_key,
            "search": searches,
            "hydrate": hydrate,
            "export": b"".join(export.streaming_content).decode(),
            "thread": thread,
            "messages": messages,
        }
    out["revisions"] = list(
        MemoryRevision.objects.for_tenant(tenant)
        .order_by("memory_id", "version")
        .values_list("memory_id", "version", "actor", "change_type", "created_at", "after")
    )
    return out


def _counts(slug: str) -> dict:
    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        return {}
    return {
        model.__name__: model.objects.for_tenant(tenant).count()
        for model in (Memory, MemoryRevision, Agent, Thread, Message, ExtractionRun)
    }


@pytest.fixture(scope="module")
def moved(django_db_blocker, tmp_path_factory):
    other = connection.settings_dict["NAME"] + "_other_instance"
    path = tmp_path_factory.mktemp("move") / "tenant.jsonl"
    with django_db_blocker.unblock():
        _create_copy(other)
        now = timezone.now()
        _populate(now)
        exported = _run("export_tenant", "--tenant", SLUG, "--output", str(path))
        assert exported.code == 0, exported.err
        old = _answers(SLUG)
        old_counts = _counts(SLUG)
        with on_database(other):
            imported = _run("import_tenant", str(path), "--tenant", MOVED, database=other)
            assert imported.code == 0, imported.err
            keys_carried = ApiKey.objects.filter(tenant__slug=MOVED).count()
            new = _answers(MOVED)
            new_counts = _counts(MOVED)
            hooks = list(WebhookEndpoint.objects.filter(tenant__slug=MOVED))
        try:
            yield SimpleNamespace(
                path=path,
                database=other,
                exported=exported,
                imported=imported,
                old=old,
                new=new,
                old_counts=old_counts,
                new_counts=new_counts,
                hooks=hooks,
                keys_carried=keys_carried,
            )
        finally:
            Tenant.objects.filter(slug=SLUG).delete()
            _drop(other)


# --- the round trip ------------------------------------------------------------------------


def test_every_read_answers_the_same_on_the_new_instance(moved):
    assert moved.new_counts == moved.old_counts
    assert moved.old_counts["Memory"] >= 15 and moved.old_counts["ExtractionRun"] == 1
    for slug in ("support-bot", "helper"):
        old, new = moved.old[slug], moved.new[slug]
        assert [(m["id"], m["version"]) for m in new["walk"]] == [
            (m["id"], m["version"]) for m in old["walk"]
        ]
        assert new["walk"] == old["walk"]
        assert new["by_key"] == old["by_key"]
        assert new["search"] == old["search"]
        assert all(new["search"].values())
        assert new["hydrate"] == old["hydrate"]
        assert new["thread"] == old["thread"]
        assert new["messages"] == old["messages"]
    assert moved.new["revisions"] == moved.old["revisions"]


def test_export_md_answers_the_same_but_for_the_slug(moved):
    def same(text: str) -> str:  # the moment it was generated, at the top, differs
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "(generated)", text, count=1)

    for slug in ("support-bot", "helper"):
        old = moved.old[slug]["export"].replace(SLUG, MOVED)
        assert same(moved.new[slug]["export"]) == same(old)
    assert "Renew the TLS certificate" in moved.new["support-bot"]["export"]


def test_the_file_holds_each_type_and_no_secret(moved):
    lines = [json.loads(line) for line in moved.path.read_text().splitlines()]
    header = lines[0]
    assert (header["type"], header["contents"], header["tenant"]["slug"]) == (
        "header",
        "tenant",
        SLUG,
    )
    assert header["app_version"]
    types = [line["type"] for line in lines[1:]]
    order = {"kind": 0, "agent": 1, "thread": 2, "message": 2, "run": 2, "memory": 3}
    order |= {"revision": 4, "webhook": 5}
    assert types == sorted(types, key=order.__getitem__)
    assert set(types) == set(order)
    summary = json.loads(moved.exported.out.strip().splitlines()[-1])
    assert summary["lines"] == {t: types.count(t) for t in set(types)}
    renew = next(line for line in lines if line.get("text") == "Renew the TLS certificate")
    assert renew["requested_expires_at"] > renew["expires_at"]
    assert len(renew["embedding"]) == 384 and renew["embedding_model"]
    bot = next(line for line in lines if line.get("slug") == "support-bot")
    assert bot["reads_from"] == ["helper"] and bot["policy"]["default_ttl"] == 200 * 86400
    [hook] = [line for line in lines if line["type"] == "webhook"]
    assert "secret" not in json.dumps(hook)


def test_webhook_secrets_are_issued_again_and_keys_are_not_carried(moved):
    [hook] = moved.hooks
    assert hook.url == HOOK_URL and hook.events == ["memory.created"]
    printed = re.search(rf"webhook {hook.pk} \(.*\): new signing secret (\S+)", moved.imported.out)
    assert printed and signing.decrypt(hook.secret_encrypted) == printed[1]
    assert moved.keys_carried == 0
    assert f"create_api_key --tenant {MOVED} --agent AGENT" in moved.imported.out
    assert (
        json.loads(moved.imported.out.strip().splitlines()[-1])["imported"]["memory"]
        == (moved.old_counts["Memory"])
    )


def test_importing_again_is_refused_and_changes_nothing(moved):
    again = _run("import_tenant", str(moved.path), "--tenant", MOVED, database=moved.database)
    assert again.code == 1
    assert f"tenant '{MOVED}' already holds data" in again.err
    # Under a third slug the memory ids are another tenant's here: refused at the first one.
    first_memory = next(
        n
        for n, line in enumerate(moved.path.read_text().splitlines(), start=1)
        if json.loads(line)["type"] == "memory"
    )
    third = _run("import_tenant", str(moved.path), "--tenant", "third", database=moved.database)
    assert third.code == 1
    assert f"line {first_memory}: memory id cannot be imported into this tenant" in third.err
    with on_database(moved.database):
        assert _counts(MOVED) == moved.new_counts
        assert not Tenant.objects.filter(slug="third").exists()


def test_a_bad_line_is_named_and_nothing_is_applied(moved, tmp_path):
    lines = moved.path.read_text().splitlines()
    bad_at = max(n for n, line in enumerate(lines) if json.loads(line)["type"] == "memory")
    record = json.loads(lines[bad_at])
    lines[bad_at] = json.dumps(record | {"importance": 7})
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n")
    result = _run("import_tenant", str(broken), "--tenant", "broken", database=moved.database)
    assert result.code == 1
    assert f"line {bad_at + 1}: " in result.err and "importance" in result.err
    assert "Nothing imported" in result.err
    with on_database(moved.database):
        assert not Tenant.objects.filter(slug="broken").exists()
        assert _counts(MOVED) == moved.new_counts


# --- bounded memory --------------------------------------------------------------------------

SEEDED = 2_500


def _held(path: Path, count: int) -> int:
    """What the first `count` lines of `path` take in memory once read (tracemalloc's bytes)."""
    tracemalloc.start()
    try:
        with path.open("rb") as source:
            held = [json.loads(line) for _, line in zip(range(count), source, strict=False)]
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(held) == count
    return size


@pytest.mark.django_db(transaction=True)
def test_a_large_tenant_moves_in_bounded_memory(tmp_path):
    """Both ways hold a batch at a time, never the tenant: each peak stays far below what
    holding the file's lines would take. (Without embeddings, so that the check stays quick
    under tracemalloc; a line with one is 384 numbers more, batched the same way.)"""
    tenant = make_tenant("large-co")
    seed_synthetic(tenant, [make_agent(tenant, "bulk-bot")], SEEDED)
    MemoryVector.objects.filter(tenant=tenant).delete()
    Memory.objects.for_tenant(tenant).update(embedding_model="")
    path = tmp_path / "large.jsonl"
    tracemalloc.start()
    try:
        with path.open("w") as out:
            for line in export_tenant(tenant):
                out.write(line)
        _, export_peak = tracemalloc.get_traced_memory()
        tenant.delete()
        tracemalloc.reset_peak()
        with path.open("rb") as source:
            result = tenant_import(lines=source, batch_size=100)
        _, import_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.counts["memory"] == SEEDED and result.tenant.slug == "large-co"
    assert Memory.objects.for_tenant(result.tenant).count() == SEEDED
    held = _held(path, SEEDED)
    assert export_peak < held / 3, (export_peak, held)
    assert import_peak < held / 3, (import_peak, held)


@pytest.mark.django_db
def test_a_file_that_is_not_a_tenant_file_is_refused_at_line_one(tenant, agent):
    line = json.dumps(memory_to_record(store(agent, "A memory")))
    with pytest.raises(ImportLineError) as exc:
        tenant_import(lines=["", line], slug="elsewhere")
    assert (exc.value.line, exc.value.message) == (2, "a tenant file starts with its header line")
    with pytest.raises(ImportRefused):
        tenant_import(lines="".join(export_tenant(tenant)).splitlines(), tenant=tenant)

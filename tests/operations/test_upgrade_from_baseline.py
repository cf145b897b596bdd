"""Upgrading a populated database: one at the first release's schema (the baselines), every
model filled through the historical models of that state, is migrated to head and then read
and written through the API (docs/operations.md#upgrading).

Every schema change after the baselines adds its step here: rows its migration must carry
(written in `fill_at_baseline`, or in a step at the release before it) and a read that shows
they came through. One throwaway database for the module; each test runs in a transaction."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from django.apps import apps as current_apps
from django.conf import settings
from django.db import connection
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from accounts import keys
from accounts.models import Agent
from accounts.principal import Principal
from memories import fingerprints, idempotency, ratelimit
from memories.embeddings import get_embedder
from memories.models import Memory, MemoryRevision, OwnerCount, Thread, WebhookEndpoint
from memories.run_liveness import Liveness
from memories.webhooks import signing
from memoryhub.backups import create_backup
from memoryhub.embedded_db import ensure_server, stop_server
from memoryhub.schema import unapplied_migrations
from tests.support.backup_instance import instance_env
from tests.support.formation import add_op, extract, llm  # noqa: F401 - `llm`: the fixture
from tests.support.upgrades import BASELINE, Upgrade, upgrade_database

SECRET = "whsec_upgrade-test-secret"


@dataclass
class Baseline:
    """What the database held before the upgrade."""

    raw_key: str
    ids: dict[str, str]
    positions: list[int]
    applied: list[str]
    backup: Path | None = None  # `manage.py backup`'s dump of it, taken at the baseline


def _memory(Memory, tenant, agent, text: str, **fields):  # noqa: N803
    embedder = get_embedder()
    return Memory.objects.create(
        tenant=tenant,
        agent=agent,
        created_by=f"agent:{agent.slug}" if agent else "user:alice",
        text=text,
        content_hash=fingerprints.content_hash(text, None),
        size_bytes=fingerprints.size_bytes(text, None),
        embedding=embedder.embed([text])[0],
        embedding_model=embedder.model_name,
        **fields,
    )


def fill_at_baseline(apps) -> Baseline:
    """A row in every model, written through the baseline's historical models."""
    now = timezone.now()
    get = apps.get_model
    Tenant = get("accounts", "Tenant")  # noqa: N806 - models, named as models
    Agent = get("accounts", "Agent")  # noqa: N806
    ApiKey = get("accounts", "ApiKey")  # noqa: N806
    User = get("auth", "User")  # noqa: N806
    Memory = get("memories", "Memory")  # noqa: N806
    Revision = get("memories", "MemoryRevision")  # noqa: N806
    Event = get("memories", "Event")  # noqa: N806

    tenant = Tenant.objects.create(
        slug="acme", name="Acme"
    )  # its trigger writes the built-in kinds
    get("memories", "Kind").objects.create(
        tenant=tenant, name="Preference", cardinality="multiple", memory_type="semantic"
    )
    support = Agent.objects.create(tenant=tenant, slug="support-bot")
    sales = Agent.objects.create(tenant=tenant, slug="sales-bot")
    support.reads_from.add(sales)
    user = User.objects.create(username="owner@acme.test", email="owner@acme.test")
    get("accounts", "Membership").objects.create(tenant=tenant, user=user, role="owner")
    raw_key = keys.generate_key()
    ApiKey.objects.create(
        tenant=tenant, agent=support, name="upgrade", prefix=keys.lookup_prefix(raw_key),
        key_hash=keys.hash_key(raw_key), scopes=["read", "write", "admin"],
    )  # fmt: skip

    memories = {
        "core": _memory(Memory, tenant, support, "Alice prefers answers in French",
                        key="pref.language", version=2),
        "user": _memory(Memory, tenant, None, "Alice is vegan", scope="user",
                        subject_id="alice"),
        "workspace": _memory(Memory, tenant, None, "The office closes at six",
                             category="workspace"),
        "shared": _memory(Memory, tenant, sales, "Sales quotes in euros"),
        "expiring": _memory(Memory, tenant, support, "Alice is in Porto this week",
                            category="daily", expires_at=now + timedelta(hours=48),
                            requested_expires_at=now + timedelta(days=7)),
        "expired": _memory(Memory, tenant, support, "Alice was in Oslo",
                           expires_at=now - timedelta(hours=1)),
        "tombstoned": _memory(Memory, tenant, support, "Alice likes jazz",
                              status="tombstoned", status_changed_at=now,
                              tombstone_reason="wrong", tombstoned_by="user:alice",
                              tombstoned_at=now, version=2),
        "conversation": _memory(Memory, tenant, support, "Alice asked for a refund",
                                category="conversation", thread_id="t-1"),
    }  # fmt: skip
    for memory in memories.values():
        Revision.objects.create(
            tenant=tenant, memory=memory, version=1, actor=memory.created_by,
            change_type="create", after={"version": 1, "text": memory.text},
        )  # fmt: skip
    for name, change in (("core", "update"), ("tombstoned", "tombstone")):
        Revision.objects.create(
            tenant=tenant, memory=memories[name], version=2, actor="user:alice",
            change_type=change, before={"version": 1}, after={"version": 2},
        )  # fmt: skip

    thread = get("memories", "Thread").objects.create(
        tenant=tenant, agent=support, thread_id="t-1", last_seq=2, extracted_seq=1,
        message_count=2, last_message_at=now,
    )  # fmt: skip
    for seq, (role, content) in enumerate(
        [("user", "I want a refund"), ("assistant", "Sure, which order?")], 1
    ):
        get("memories", "Message").objects.create(
            tenant=tenant, thread=thread, seq=seq, role=role, content=content,
            dedup_hash=f"hash-{seq}",
        )  # fmt: skip
    get("memories", "ExtractionRun").objects.create(
        tenant=tenant, agent=support, thread=thread, trigger="idle", state="done",
        from_seq=0, to_seq=1, finished_at=now,
    )  # fmt: skip

    positions = []
    for memory, event_type in ((memories["core"], "memory.created"), (memories["core"], "memory.updated")):  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute("SELECT nextval('memories_event_position_seq')")
            positions.append(cursor.fetchone()[0])
        Event.objects.create(
            tenant=tenant, agent=support, position=positions[-1], type=event_type,
            category="core", memory_id=memory.pk, version=len(positions),
            data={"id": memory.pk, "text": memory.text},
        )  # fmt: skip
    endpoint = get("memories", "WebhookEndpoint").objects.create(
        tenant=tenant, url="https://hooks.example.test/memoryhub", events=["memory.created"],
        secret_encrypted=signing.encrypt(SECRET), created_by="user:owner@acme.test",
        cursor=positions[0],
    )  # fmt: skip
    get("memories", "WebhookDelivery").objects.create(
        tenant=tenant, endpoint=endpoint, event=Event.objects.get(position=positions[0]),
        position=positions[0], event_type="memory.created", memory_id=memories["core"].pk,
        state="delivered", attempts=1, delivered_at=now,
    )  # fmt: skip
    get("memories", "JobRun").objects.create(
        job="prune_memories", status="done", finished_at=now, counts={"expired": 1}
    )
    get("memories", "IdempotencyRecord").objects.create(
        tenant=tenant, key_digest=idempotency.key_digest(tenant.pk, "retry-1"),
        request_hash="0" * 64, response_status=201, response_body={"ok": True},
    )  # fmt: skip
    get("memories", "DailyReads").objects.create(tenant=tenant, day=now.date(), reads=5)
    return Baseline(
        raw_key=raw_key,
        ids={name: memory.pk for name, memory in memories.items()},
        positions=positions,
        applied=[],
    )


def steps_after_baseline() -> None:
    """What each migration after the baselines brings, used on the upgraded database."""
    # memories 0002: the shared rate-limit counters (nothing to carry; the first count works).
    assert ratelimit.count_in_database("upgrade-check")[0] == 1
    # memories 0003: run leases behind a transaction-mode pooler (none to carry; one is taken).
    with override_settings(MEMORYHUB_DB_POOL_MODE="transaction"):
        assert Liveness(namespace=0).try_hold(1)
    # memories 0004: every memory's vector moved to the vectors' table, the same numbers under
    # the same model, with the memory's owner.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM memories_memory m JOIN memories_memoryvector v "
            "ON v.memory_id = m.id WHERE v.embedding = m.embedding AND v.model = m.embedding_model "
            "AND v.tenant_id = m.tenant_id AND v.agent_id IS NOT DISTINCT FROM m.agent_id "
            "AND v.subject_id IS NOT DISTINCT FROM m.subject_id"
        )
        assert cursor.fetchone()[0] == Memory.objects.count() == 8


@pytest.fixture(scope="module")
def baseline(django_db_blocker):
    with upgrade_database(django_db_blocker):
        upgrade = Upgrade()
        state = fill_at_baseline(upgrade.migrate_to(BASELINE))
        backups = Path(tempfile.mkdtemp(prefix="memoryhub-upgrade-backup-"))
        state.backup = create_backup(backups).dump_path
        state.applied = upgrade.migrate_to_head()
        steps_after_baseline()
        yield state
        shutil.rmtree(backups, ignore_errors=True)


@pytest.fixture
def client(baseline, db):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {baseline.raw_key}")
    return api


def test_every_model_has_rows_and_nothing_is_left_to_apply(baseline, db):
    """A model added later fails here until this test fills it."""
    empty = [
        model.__name__
        for app in ("accounts", "memories")
        for model in current_apps.get_app_config(app).get_models()
        if not model._meta.proxy and not model.objects.exists()
    ]
    assert empty == []
    assert unapplied_migrations() == []
    # The triggers counted what was written: the agent's live memories (core, expiring, expired
    # until pruned, conversation), the workspace's one, the subject's user one.
    counts = {(row.owner_id, row.subject_id): row.active for row in OwnerCount.objects.all()}
    support, sales = (Agent.objects.get(slug=slug).pk for slug in ("support-bot", "sales-bot"))
    assert counts == {(support, ""): 4, (sales, ""): 1, (0, ""): 1, (-1, "alice"): 1}


def test_semantic_search_reads_the_moved_vectors(client, baseline):
    found = client.post(
        "/api/v1/search", {"query": "Alice prefers answers in French", "mode": "semantic"},
        format="json",
    ).json()  # fmt: skip
    assert found["memories"][0]["id"] == baseline.ids["core"]
    assert found["memories"][0]["quality"]["relevance"] > 0.99


def test_a_write_by_the_previous_release_still_reaches_the_vectors_table(baseline, db):
    """During a rolling upgrade a node of the previous release still writes the row's old
    column: the migration's trigger carries that into the vectors' table (and a removal)."""
    memory_id = baseline.ids["shared"]
    vector = "[" + ",".join(["0.5"] * 384) + "]"
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE memories_memory SET embedding = %s::vector, embedding_model = 'old' "
            "WHERE id = %s",
            [vector, memory_id],
        )
        cursor.execute(
            "SELECT model, embedding = %s::vector FROM memories_memoryvector WHERE memory_id = %s",
            [vector, memory_id],
        )
        assert cursor.fetchone() == ("old", True)
        cursor.execute("UPDATE memories_memory SET embedding = NULL WHERE id = %s", [memory_id])
        cursor.execute(
            "SELECT count(*) FROM memories_memoryvector WHERE memory_id = %s", [memory_id]
        )
        assert cursor.fetchone()[0] == 0


def test_a_backup_taken_before_the_upgrade_restores_and_migrates_forward(baseline):
    """A database restored from a backup of the previous release: `restore` migrates it forward
    on a server of its own, and the vectors move as they do in place."""
    target_dir = Path(tempfile.mkdtemp(prefix="memoryhub-upgrade-restore-"))
    target = ensure_server(target_dir, throwaway=True)
    try:
        restore = subprocess.run(
            [sys.executable, "manage.py", "restore", str(baseline.backup)],
            cwd=settings.BASE_DIR,
            env=instance_env(target_dir),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert restore.returncode == 0, restore.stdout + restore.stderr
        with psycopg.connect(target.dsn()) as conn:
            moved = conn.execute(
                "SELECT count(*) FROM memories_memory m JOIN memories_memoryvector v "
                "ON v.memory_id = m.id WHERE v.embedding = m.embedding "
                "AND v.model = m.embedding_model AND v.tenant_id = m.tenant_id"
            ).fetchone()[0]
            applied = conn.execute(
                "SELECT count(*) FROM django_migrations "
                "WHERE app = 'memories' AND name = '0004_memory_vectors'"
            ).fetchone()[0]
        assert (moved, applied) == (8, 1)
    finally:
        stop_server(target_dir)
        shutil.rmtree(target_dir, ignore_errors=True)


def test_search_finds_migrated_memories(client, baseline):
    found = client.post("/api/v1/search", {"query": "French answers"}, format="json").json()
    assert baseline.ids["core"] in [m["id"] for m in found["memories"]]
    found = client.post(
        "/api/v1/search",
        {"query": "vegan", "subject_id": "alice", "mode": "keyword"},
        format="json",
    ).json()
    assert [m["id"] for m in found["memories"]] == [baseline.ids["user"]]


def test_a_list_walk_returns_every_visible_migrated_memory_once(client, baseline):
    seen, cursor = [], None
    while True:
        page = client.get(
            "/api/v1/memories", {"limit": 2, **({"cursor": cursor} if cursor else {})}
        )
        body = page.json()
        seen += [m["id"] for m in body["memories"]]
        if not (cursor := body["next_cursor"]):
            break
    ids = baseline.ids
    assert sorted(seen) == sorted(
        ids[name] for name in ("core", "workspace", "shared", "expiring", "conversation")
    )


def test_the_event_feed_goes_on_after_the_migrated_positions(client, baseline):
    feed = client.get("/api/v1/events").json()
    assert [e["id"] for e in feed["events"]] == baseline.positions
    memory_id = baseline.ids["core"]
    changed = client.patch(
        f"/api/v1/memories/{memory_id}", {"text": "Alice prefers answers in Portuguese"},
        format="json", HTTP_IF_MATCH='"2"',
    )  # fmt: skip
    assert changed.status_code == 200, changed.content
    assert changed.json()["memory"]["version"] == 3  # after the migrated history's 1 and 2
    assert list(
        MemoryRevision.objects.filter(memory_id=memory_id).values_list("version", flat=True)
    ) == [1, 2, 3]
    later = client.get("/api/v1/events", {"after": feed["next_cursor"]}).json()["events"]
    assert [(e["type"], e["memory_id"]) for e in later] == [("memory.updated", memory_id)]
    assert later[0]["id"] > max(baseline.positions)


def _text(streamed) -> str:
    return b"".join(streamed.streaming_content).decode()


def test_export_holds_the_live_migrated_memories(client, baseline):
    text = _text(client.get("/api/v1/export.md"))
    assert "Alice prefers answers in French" in text and "Sales quotes in euros" in text
    assert "Alice likes jazz" not in text  # tombstoned
    with_tombstones = client.get("/api/v1/export.md", {"include_tombstoned": "true"})
    assert "Alice likes jazz" in _text(with_tombstones)


def test_a_migrated_idempotency_record_still_guards_its_key(client, baseline):
    retried = client.post(
        "/api/v1/memories", {"text": "Other"}, format="json", HTTP_IDEMPOTENCY_KEY="retry-1"
    )
    assert retried.json()["error"]["code"] == "IDEMPOTENCY_MISMATCH"


def test_a_migrated_webhook_secret_still_decrypts(baseline, db):
    (endpoint,) = WebhookEndpoint.objects.all()
    assert signing.decrypt(endpoint.secret_encrypted) == SECRET


def test_formation_runs_on_a_migrated_thread(baseline, db, fake_llm, llm):  # noqa: F811
    agent = Agent.objects.get(slug="support-bot")
    principal = Principal(tenant=agent.tenant, agent=agent)
    fake_llm.queue_json({"operations": [add_op("Alice wants a refund", evidence=[2])]})

    run = extract(principal, llm, thread_id="t-1")

    assert (run.state, run.from_seq, run.to_seq) == ("done", 2, 2)
    formed = Memory.objects.get(text="Alice wants a refund")
    assert formed.evidence and Thread.objects.get(thread_id="t-1").extracted_seq == 2

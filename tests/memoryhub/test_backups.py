"""`manage.py backup` and `restore`, as real processes on real PostgreSQL servers.

One scenario (module-scoped: servers, subprocesses and dumps are costly): an instance on an
embedded server of its own is seeded, then backed up while a writer keeps storing through the
API; its database is dropped and the backup restored into a fresh embedded server (a new data
directory). Refused restores (wrong SECRET_KEY, damaged archives, a non-empty target) are tried
on that restored target, and must leave it as it was. The tests below assert on what the
scenario recorded.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
import pytest
from django.conf import settings

from memories.webhooks import signing
from memoryhub.embedded_db import ensure_server, stop_server
from memoryhub.throwaway import ApiServer
from tests.support.backup_instance import instance_env
from tests.support.commands import start_command
from tests.support.receivers import Receiver

BASE_DIR = Path(settings.BASE_DIR)
WRITES_BEFORE = 5
WRITES_AFTER = 3


def run(args: list[str], data_dir: Path, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=BASE_DIR,
        env=instance_env(data_dir, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


def manage(data_dir: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return run(["manage.py", *args], data_dir, **extra)


def state_of(dsn: str) -> str:
    """A digest of everything the database holds: each table's rows, in order."""
    digest = hashlib.sha256()
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
        for (table,) in tables:
            rows = conn.execute(
                f"SELECT md5(string_agg(t::text, '|' ORDER BY t::text)) FROM \"{table}\" t"
            )
            digest.update(f"{table}:{rows.fetchone()[0]}".encode())
    return digest.hexdigest()


class Writer(threading.Thread):
    """Stores memories through the API one after another, recording each acknowledged write
    with the moment its request was sent."""

    def __init__(self, base_url: str, key: str):
        super().__init__(daemon=True)
        self.client = httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )
        self.acked: list[tuple[float, str]] = []  # (sent at, memory id)
        self.stop = threading.Event()
        self.progress = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            i = 0
            while not self.stop.is_set():
                sent = time.monotonic()
                answer = self.client.post(
                    "/api/v1/memories", json={"text": f"write {i}", "dedup_policy": "insert"}
                )
                assert answer.status_code == 201, answer.text
                with self.progress:
                    self.acked.append((sent, answer.json()["memory"]["id"]))
                    self.progress.notify_all()
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the scenario
            self.error = exc
            with self.progress:
                self.progress.notify_all()

    def wait_for(self, count: int) -> None:
        with self.progress:
            assert self.progress.wait_for(
                lambda: len(self.acked) >= count or self.error is not None, timeout=120
            )
        assert self.error is None, self.error


def feed(client: httpx.Client, after: str) -> tuple[list[dict], str]:
    """Every event after `after`, paging to the end; and the cursor to continue from."""
    events: list[dict] = []
    while True:
        page = client.get("/api/v1/events", params={"after": after, "limit": 1000}).json()
        events += page["events"]
        after = page["next_cursor"]
        if not page["events"]:
            return events, after


@dataclass
class Scenario:
    seeded: dict
    manifest: dict
    dump: Path
    backup: subprocess.CompletedProcess
    restore: subprocess.CompletedProcess
    acked_before: list[str]
    acked_after: list[str]
    restored_ids: set[str]
    restored_counts: dict[str, int]
    events_before: list[dict]
    events_restored: list[dict]
    event_after_restore: list[dict]
    refused: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    unchanged: dict[str, bool] = field(default_factory=dict)
    forced: subprocess.CompletedProcess | None = None
    read_with_old_key: int = 0
    deliveries: list = field(default_factory=list)


def _counts(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
        ).fetchall()
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for (t,) in tables}


@pytest.fixture(scope="module")
def scenario():
    # Not under pytest's tmp_path (mode 0700 as root): the servers run as their own user.
    root = Path(tempfile.mkdtemp(prefix="memoryhub-backups-"))
    source_dir, target_dir, out = root / "source", root / "target", root / "out"
    receiver = Receiver()
    receiver_url = receiver.start()
    source = ensure_server(source_dir, throwaway=True)
    try:
        assert manage(source_dir, "migrate", "-v0").returncode == 0
        seeding = run(["-m", "tests.support.backup_instance", "seed", receiver_url], source_dir)
        assert seeding.returncode == 0, seeding.stderr
        seeded = json.loads(seeding.stdout.strip().splitlines()[-1])
        key = seeded["keys"]["acme"]

        with ApiServer(source_dir) as api:
            reader = httpx.Client(
                base_url=api.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            )
            # A consumer's cursor, taken before the writes of the backup's time.
            _, cursor = feed(reader, "")
            writer = Writer(api.base_url, key)
            writer.start()
            writer.wait_for(WRITES_BEFORE)
            events_before, _ = feed(reader, cursor)
            started = time.monotonic()
            backup = manage(source_dir, "backup", "--output", str(out), "--verify")
            ended = time.monotonic()
            writer.wait_for(len(writer.acked) + WRITES_AFTER)
            writer.stop.set()
            writer.join(60)
            assert writer.error is None, writer.error
        assert backup.returncode == 0, backup.stderr
        dump = next(out.glob("memoryhub-*.dump"))
        manifest = json.loads(next(out.glob("memoryhub-*.manifest.json")).read_text())

        # The source is gone: its database dropped, its server stopped.
        with psycopg.connect(source.dsn("postgres"), autocommit=True) as conn:
            conn.execute("DROP DATABASE memoryhub WITH (FORCE)")
        stop_server(source_dir)

        target = ensure_server(target_dir, throwaway=True)
        restore = manage(target_dir, "restore", str(dump))
        assert restore.returncode == 0, restore.stdout + restore.stderr
        with psycopg.connect(target.dsn()) as conn:
            restored_ids = {row[0] for row in conn.execute("SELECT id FROM memories_memory")}
        result = Scenario(
            seeded=seeded,
            manifest=manifest,
            dump=dump,
            backup=backup,
            restore=restore,
            acked_before=[m for sent, m in writer.acked if sent < started],
            acked_after=[m for sent, m in writer.acked if sent > ended],
            restored_ids=restored_ids,
            restored_counts=_counts(target.dsn()),
            events_before=events_before,
            events_restored=[],
            event_after_restore=[],
        )

        # Refused restores, each with --force where it matters, on the restored target.
        damaged = root / "damaged"
        damaged.mkdir()
        manifest_path = next(out.glob("memoryhub-*.manifest.json"))
        raw = dump.read_bytes()
        flipped = bytearray(raw)
        flipped[len(raw) // 2] ^= 0x01
        for name, body in (("truncated", raw[: len(raw) // 2]), ("flipped", bytes(flipped))):
            (damaged / f"{name}.dump").write_bytes(body)
            (damaged / f"{name}.manifest.json").write_text(manifest_path.read_text())
        attempts = {
            "wrong_key": (str(dump), "--force", {"SECRET_KEY": "another-" + "k" * 50}),
            "truncated": (str(damaged / "truncated.dump"), "--force", {}),
            "flipped": (str(damaged / "flipped.dump"), "--force", {}),
            "not_empty": (str(dump), None, {}),
        }
        for name, (path, flag, extra) in attempts.items():
            before = state_of(target.dsn())
            args = ["restore", path] + ([flag] if flag else [])
            result.refused[name] = manage(target_dir, *args, **extra)
            result.unchanged[name] = state_of(target.dsn()) == before
        result.forced = manage(target_dir, "restore", str(dump), "--force")

        with ApiServer(target_dir) as api:
            client = httpx.Client(
                base_url=api.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
            )
            memory_id = seeded["memories"]["acme"]["revised"]
            result.read_with_old_key = client.get(f"/api/v1/memories/{memory_id}").status_code
            result.events_restored, resumed = feed(client, cursor)
            stored = client.post("/api/v1/memories", json={"text": "after the restore"})
            assert stored.status_code == 201, stored.text
            result.event_after_restore, _ = feed(client, resumed)
        mark = len(receiver.received)
        delivered = run(["-m", "tests.support.backup_instance", "deliver"], target_dir)
        assert delivered.returncode == 0, delivered.stderr
        result.deliveries = receiver.received[mark:]
        yield result
    finally:
        receiver.stop()
        stop_server(source_dir)
        stop_server(target_dir)
        shutil.rmtree(root, ignore_errors=True)


def test_the_backup_writes_a_dump_and_its_manifest(scenario):
    assert scenario.backup.stdout.startswith("backup ")
    assert "verified" in scenario.backup.stdout
    assert scenario.backup.stderr == ""  # progress only on a terminal
    manifest = scenario.manifest
    assert manifest["dump"]["sha256"] == hashlib.sha256(scenario.dump.read_bytes()).hexdigest()
    assert manifest["server"]["postgresql_major"] == 18 and manifest["server"]["pgvector"]
    applied = sum(len(names) for names in manifest["migrations"].values())
    assert applied == manifest["tables"]["django_migrations"] > 0
    assert manifest["keys"]["secret_key_fingerprint"] == signing.key_fingerprint()
    assert manifest["tables"]["accounts_tenant"] == 2


def test_writes_acknowledged_before_the_backup_are_restored_and_later_ones_are_not(scenario):
    assert len(scenario.acked_before) >= WRITES_BEFORE
    assert set(scenario.acked_before) <= scenario.restored_ids
    assert len(scenario.acked_after) >= WRITES_AFTER
    assert not set(scenario.acked_after) & scenario.restored_ids


def test_the_restored_rows_are_the_manifests(scenario):
    assert scenario.restored_counts == scenario.manifest["tables"]
    assert scenario.manifest["tables"]["memories_memory"] == len(scenario.restored_ids)
    seeded = {m for tenant in scenario.seeded["memories"].values() for m in tenant.values()}
    assert seeded <= scenario.restored_ids
    assert scenario.seeded["runs"]["acme"][0] == "done"


def test_the_restore_prints_what_it_checked(scenario):
    lines = scenario.restore.stdout.splitlines()
    checked = [line.split(":")[0] for line in lines if line.startswith("ok  ")]
    assert checked == [
        "ok  archive",
        "ok  keys",
        "ok  rows",
        "ok  migrations",
        "ok  sequences",
        "ok  counters",
        "ok  api keys",
        "ok  webhook secrets",
    ]
    assert "ok  webhook secrets: 1 decrypt" in scenario.restore.stdout
    assert lines[-1].startswith("restored ")


def test_an_old_api_key_still_authenticates(scenario):
    assert scenario.read_with_old_key == 200


def test_the_event_feed_continues_from_an_old_cursor(scenario):
    restored = scenario.events_restored
    ids = [event["id"] for event in restored]
    # No repeat, in order, and the events a consumer could read before the backup come first,
    # unchanged (no gap).
    assert len(set(ids)) == len(ids) and [int(i) for i in ids] == sorted(int(i) for i in ids)
    assert restored[: len(scenario.events_before)] == scenario.events_before
    created = {e["memory_id"] for e in restored if e["type"] == "memory.created"}
    assert set(scenario.acked_before) <= created
    assert not set(scenario.acked_after) & created
    # Writes after the restore continue the feed.
    after = scenario.event_after_restore
    assert [e["type"] for e in after] == ["memory.created"]
    assert int(after[0]["id"]) > int(ids[-1])


def test_a_webhook_delivery_after_the_restore_is_signed_with_the_old_secret(scenario):
    secret = scenario.seeded["webhook"]["secret"]
    assert scenario.deliveries
    for received in scenario.deliveries:
        assert signing.verify(secret, received.body, received.headers["MemoryHub-Signature"])
    texts = [json.loads(r.body)["data"].get("text") for r in scenario.deliveries]
    assert "after the restore" in texts


def test_a_wrong_secret_key_is_refused_and_changes_nothing(scenario):
    refused = scenario.refused["wrong_key"]
    assert refused.returncode != 0
    assert "another SECRET_KEY" in refused.stderr and "Nothing was changed" in refused.stderr
    assert scenario.unchanged["wrong_key"]


@pytest.mark.parametrize("damage", ["truncated", "flipped"])
def test_a_damaged_dump_is_refused_before_the_target_is_touched(scenario, damage):
    refused = scenario.refused[damage]
    assert refused.returncode != 0
    assert "is damaged: its sha256" in refused.stderr
    assert scenario.unchanged[damage]


def test_a_non_empty_target_is_refused_without_force(scenario):
    refused = scenario.refused["not_empty"]
    assert refused.returncode != 0
    assert "not empty" in refused.stderr and "--force" in refused.stderr
    assert scenario.unchanged["not_empty"]
    assert scenario.forced is not None and scenario.forced.returncode == 0, scenario.forced.stderr
    assert "ok  rows" in scenario.forced.stdout


@pytest.mark.django_db
def test_a_pg_dump_of_another_major_version_is_refused(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    fake = tools / "pg_dump"
    fake.write_text('#!/bin/sh\necho "pg_dump (PostgreSQL) 16.4"\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    process = start_command(
        "backup", "--output", str(out), env={"MEMORYHUB_PG_BIN_DIR": str(tools)}
    )
    _, stderr = process.communicate(timeout=120)
    assert process.returncode != 0
    assert "PostgreSQL 18" in stderr and "version 16.4" in stderr, stderr
    assert not list(out.glob("*")) if out.exists() else True

"""Two real nodes on one database, deployed with the files of `deploy/` (docs/operations.md#running-on-several-machines).

One database of its own on the test run's server; PgBouncer in transaction mode in front of it
(deploy/pgbouncer/pgbouncer.ini); two `serve` nodes, each with its django-q2 cluster, started
with deploy/systemd/memoryhub.service's command and the settings of deploy/systemd/memoryhub.env
(production mode, `MEMORYHUB_DB_POOL_MODE=transaction`, LISTEN over
`MEMORYHUB_DIRECT_DATABASE_URL`); nginx in front (deploy/nginx/memoryhub.conf), ending TLS.

The chain a request takes is client -> load balancer -> nginx -> node. The nodes trust nginx
(127.0.0.1, where it runs) and the load balancer (127.0.0.3): a test request sent from
127.0.0.3 with `X-Forwarded-For: <client>` is the load balancer passing a client on, and nginx
appends 127.0.0.3. Anyone else (127.0.0.4 here) is an untrusted client, whether it talks to
nginx or to a node directly. Direct requests to a node from 127.0.0.1 stand for a second proxy
path (trusted, HTTPS said by `X-Forwarded-Proto`).

A mixed load runs through nginx from a few client threads while node 1 is killed (`kill -9`,
every process of it) and started again; then the assertions, one concern per test. The cluster
is module-scoped: the whole module takes about a minute and a half.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import re
import signal
import ssl
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.db import connection
from mcp.server.subscriptions import ToolsListChanged

from memories.webhooks.delivery import LEASE
from memoryhub.embedded_db import DB_USER
from memoryhub.throwaway import free_port
from tests.factories import make_agent, make_key, make_operator, make_tenant
from tests.support.commands import BASE_DIR, until
from tests.support.components import component_path
from tests.support.deploy import environment, exec_start, render, running_nginx
from tests.support.fake_llm import FakeLLM
from tests.support.formation import add_op
from tests.support.mcp import listen_for_list_changes
from tests.support.pgbouncer import running_pgbouncer
from tests.support.receivers import Receiver
from tests.support.upgrades import upgrade_database

pytestmark = [pytest.mark.requires_component("nginx", "pgbouncer"), pytest.mark.slow]

LIMIT = 30  # MEMORYHUB_RATE_LIMIT_PER_MINUTE: per key, across the nodes
USES = LIMIT - 5  # the most requests the load sends with one key
NGINX, LB, STRANGER = "127.0.0.1", "127.0.0.3", "127.0.0.4"
PASSWORD = "correct horse battery staple"
EMAIL = "owner@acme.test"
LOAD_SECONDS = 30  # the most the load runs; it ends sooner once node 1 is back and busy
SCHEDULE = "multi-node purge_retention"
# The stand-in model's answer time: runs are in flight on the clusters when node 1 dies.
MODEL_SECONDS = 0.2
MARKER = re.compile(r"Remember my code word: (formation-[0-9a-f]{8})")


# --- the deployment ---------------------------------------------------------------------------


class Keys:
    """API keys of the one agent, handed out so that none is used more than USES times (the
    rate limit is per key): `take(n)` reserves n uses of one key."""

    def __init__(self, raws: list[str]) -> None:
        self._raws, self._used, self._lock = raws, Counter(), threading.Lock()

    def take(self, uses: int = 1) -> str:
        with self._lock:
            for raw in self._raws:
                if self._used[raw] + uses <= USES:
                    self._used[raw] += uses
                    return raw
        raise AssertionError("the load ran out of keys")


@dataclass
class Node:
    port: int
    env: dict[str, str]
    log: Path
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(
                exec_start("systemd/memoryhub.service"),
                cwd=BASE_DIR,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def answering(self) -> bool:
        assert self.process is not None and self.process.poll() is None, self.log.read_text()
        try:
            return direct(self).get("/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> int:
        """`kill -9` of every process of the node (serve runs its web server and cluster in
        process groups of their own): as when its machine dies. How many were killed."""
        assert self.process is not None
        root = psutil.Process(self.process.pid)
        victims = [root, *root.children(recursive=True)]
        for group in {os.getpgid(p.pid) for p in victims if p.is_running()}:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        psutil.wait_procs(victims, timeout=10)
        self.process.wait(10)
        return len(victims)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class Cluster:
    nodes: list[Node]
    https: str  # nginx's TLS server
    http: str  # nginx's plain HTTP server
    tls: ssl.SSLContext
    keys: Keys
    admin_key: str
    direct_url: str  # PostgreSQL itself
    receiver: Receiver
    model: FakeLLM
    nginx_dir: Path
    schedule_due: list[dt.datetime] = field(default_factory=list)

    def client(self, source: str = NGINX, **kwargs) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=source, verify=self.tls)
        return httpx.Client(base_url=self.https, transport=transport, timeout=30, **kwargs)

    def sql(self, query: str, params=()) -> list[tuple]:
        with psycopg.connect(self.direct_url, autocommit=True) as conn:
            return conn.execute(query, params).fetchall()


def direct(node: Node, source: str = NGINX) -> httpx.Client:
    """Straight to a node, past nginx. From 127.0.0.1 (trusted) it says HTTPS as a proxy
    would; from elsewhere the header is sent all the same (and must be ignored)."""
    return httpx.Client(
        base_url=node.url,
        transport=httpx.HTTPTransport(local_address=source),
        # The public name, as nginx passes it on (ALLOWED_HOSTS names no node's address).
        headers={"X-Forwarded-Proto": "https", "Host": "localhost"},
        timeout=30,
    )


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def self_signed(folder: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def model_reply(request) -> dict:
    """The stand-in model: one fact per conversation, named by the marker it was told."""
    time.sleep(MODEL_SECONDS)  # a model takes its time (the stand-in's answer time)
    (marker,) = set(MARKER.findall(request.prompt))
    # Words of its own, so that no fact is a near-duplicate of another.
    return {"operations": [add_op(" ".join(f"{marker}-{word}" for word in range(8)))]}


def seed() -> tuple[list[str], str]:
    """The tenant, its agent's keys, an operator who can sign in to the console; the test
    schedule. Written through the ORM (this process points at the nodes' database)."""
    from django.utils import timezone
    from django_q.models import Schedule

    agent = make_agent(make_tenant("acme"), "bot")
    raws = [make_key(agent)[1] for _ in range(400)]
    admin = make_key(agent, scopes=["read", "write", "admin"])[1]
    user = make_operator(agent.tenant, EMAIL).user
    # The nodes' hasher (the test settings' is not theirs), at a cost fit for a test.
    user.password = PBKDF2PasswordHasher().encode(PASSWORD, "multinodesalt", iterations=1000)
    user.save(update_fields=["password"])
    # A job scheduled every minute. Each run records the time it was due as its `as_of`, so a
    # period run twice would show twice. The migrations' own schedule of this job is put off.
    Schedule.objects.filter(args__contains="purge_retention").update(
        next_run=timezone.now() + dt.timedelta(days=1)
    )
    Schedule.objects.create(
        name=SCHEDULE,
        func="memories.tasks.run_job",
        args="'purge_retention'",
        schedule_type=Schedule.MINUTES,
        minutes=1,
        next_run=timezone.now() - dt.timedelta(seconds=1),
        intended_date_kwarg="now",
    )
    return raws, admin


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker):
    pgbouncer, nginx = component_path("pgbouncer"), component_path("nginx")
    assert nginx
    with (
        upgrade_database(django_db_blocker, suffix="nodes"),
        tempfile.TemporaryDirectory(prefix="multi-node-") as folder,
        FakeLLM.running(default_reply=model_reply) as model,
    ):
        work = Path(folder)
        server = connection.settings_dict
        direct_url = (
            f"postgresql://{DB_USER}@/{server['NAME']}?host={server['HOST']}&port={server['PORT']}"
        )
        bouncer_port, https_port, http_port = free_port(), free_port(), free_port()
        bouncer = work / "pgbouncer"
        bouncer.mkdir()
        (bouncer / "userlist.txt").write_text(f'"{DB_USER}" "pooled-secret"\n')
        (bouncer / "pgbouncer.ini").write_text(
            render(
                "pgbouncer/pgbouncer.ini",
                SERVER_HOST=server["HOST"],
                SERVER_PORT=str(server["PORT"]),
                SERVER_DATABASE=server["NAME"],
                LISTEN_ADDR="127.0.0.1",
                LISTEN_PORT=str(bouncer_port),
                USERLIST=str(bouncer / "userlist.txt"),
            )
        )
        receiver = Receiver()
        receiver.url = receiver.start()  # type: ignore[attr-defined]
        settings_file = render(
            "systemd/memoryhub.env",
            SECRET_KEY="multi-node-" + "k" * 50,
            PUBLIC_HOST="localhost",
            PUBLIC_ORIGIN=f"https://localhost:{https_port}",
            TRUSTED_PROXIES=f"{NGINX}/32, {LB}/32",
            POOLED_DATABASE_URL=(
                f"postgres://{DB_USER}:pooled-secret@127.0.0.1:{bouncer_port}/memoryhub"
            ),
            DIRECT_DATABASE_URL=direct_url,
            RATE_LIMIT_PER_MINUTE=str(LIMIT),
        )
        unset = {"DATABASE_URL", "MEMORYHUB_TEST_DB", "PYTEST_XDIST_WORKER"}
        base = {k: v for k, v in os.environ.items() if k not in unset and "DJANGO" not in k}
        env = base | environment(settings_file)
        env |= {
            "DJANGO_SETTINGS_MODULE": "memoryhub.settings",
            "PYTHONUNBUFFERED": "1",
            # Sized for a test machine: one web process and one cluster worker per node.
            "MEMORYHUB_HOST": "127.0.0.1",
            "MEMORYHUB_DATA_DIR": str(work / "data"),
            "WEB_CONCURRENCY": "1",
            "MEMORYHUB_Q_WORKERS": "1",
            "MEMORYHUB_DB_CONNECTIONS": "12",
            "MEMORYHUB_EMBEDDER": "hashing",
            "MEMORYHUB_LLM_URL": model.url,
            "MEMORYHUB_LLM_TIMEOUT": "10",
            "MEMORYHUB_WEBHOOK_ALLOW_INSECURE": "1",
            "MEMORYHUB_WEBHOOK_TIMEOUT": "2",
            # A dead worker's run is taken over after 4 s instead of a minute.
            "MEMORYHUB_RUN_LEASE_SECONDS": "4",
            # Were the listener polling, no tools/list_changed would come in time.
            "MEMORYHUB_KINDS_POLL_SECONDS": "3600",
        }
        migrate = subprocess.run(
            exec_start("systemd/memoryhub-migrate.service"),
            cwd=BASE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert migrate.returncode == 0, migrate.stderr
        raws, admin = seed()
        nodes = [Node(port=free_port(), env=env, log=work / f"node{i}.log") for i in (1, 2)]
        for node in nodes:
            node.env = env | {"MEMORYHUB_PORT": str(node.port)}
        cert, key = self_signed(work)
        upstreams = "\n".join(
            f"    server 127.0.0.1:{node.port} max_fails=1 fail_timeout=2s;" for node in nodes
        )
        config = render(
            "nginx/memoryhub.conf",
            UPSTREAMS=upstreams,
            HTTP_LISTEN=f"127.0.0.1:{http_port}",
            HTTPS_LISTEN=f"127.0.0.1:{https_port}",
            SERVER_NAME="localhost",
            TLS_CERTIFICATE=str(cert),
            TLS_CERTIFICATE_KEY=str(key),
        )
        with (
            running_pgbouncer(pgbouncer, bouncer / "pgbouncer.ini", bouncer_port),
            running_nginx(config, https_port) as nginx_dir,
        ):
            try:
                for node in nodes:
                    node.start()
                for node in nodes:
                    try:
                        until(node.answering, 120, f"node on {node.port}")
                    except AssertionError as exc:
                        raise AssertionError(node.log.read_text()[-3000:]) from exc
                tls = ssl.create_default_context(cafile=str(cert))
                yield Cluster(
                    nodes=nodes,
                    https=f"https://localhost:{https_port}",
                    http=f"http://localhost:{http_port}",
                    tls=tls,
                    keys=Keys(raws),
                    admin_key=admin,
                    direct_url=direct_url,
                    receiver=receiver,
                    model=model,
                    nginx_dir=nginx_dir,
                )
            finally:
                for node in nodes:
                    node.stop()
                receiver.stop()


@pytest.fixture
def orm(cluster, django_db_blocker):
    """The ORM on the nodes' database, for assertions."""
    with django_db_blocker.unblock():
        yield


# --- the load ---------------------------------------------------------------------------------

UNANSWERED = (502, 503, 504)  # a node died under the request, or nginx found none


@dataclass
class Store:
    text: str
    idempotency_key: str
    key: str
    first: tuple[int, bytes] | None = None  # the first answer that came
    replays: list[tuple[int, int, bytes]] = field(default_factory=list)  # (node, status, body)


@dataclass
class Race:
    memory_id: str
    version: int
    statuses: list[int | None]
    after: int  # the memory's version once both answered


@dataclass
class Load:
    stores: list[Store] = field(default_factory=list)
    races: list[Race] = field(default_factory=list)
    threads: list[str] = field(default_factory=list)  # formation: one conversation each
    reads: Counter = field(default_factory=Counter)  # search/hydrate statuses
    unexpected: list[str] = field(default_factory=list)
    feed: list[int] = field(default_factory=list)  # event ids, as a follower read them
    killed: int = 0
    killed_at_db: dt.datetime | None = None
    node1_back_at: float = 0.0
    replays_on_node1_after_restart: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def post(client: httpx.Client, path: str, key: str, body: dict, **headers) -> httpx.Response | None:
    try:
        return client.post(path, json=body, headers=auth(key) | headers)
    except httpx.TransportError:
        return None


def store_once(cluster: Cluster, client: httpx.Client, load: Load) -> None:
    """Store a new memory through nginx until it is acknowledged (retrying with the same
    Idempotency-Key), then send the same request to each node directly."""
    item = Store(f"fact {uuid.uuid4().hex}", str(uuid.uuid4()), cluster.keys.take(6))
    body = {"text": item.text, "dedup_policy": "insert"}
    for _ in range(3):
        response = post(
            client, "/api/v1/memories", item.key, body, **{"Idempotency-Key": item.idempotency_key}
        )
        if response is not None and response.status_code not in UNANSWERED:
            item.first = (response.status_code, response.content)
            break
    if item.first is not None and item.first[0] == 201:
        for number, node in enumerate(cluster.nodes, 1):
            with direct(node) as to_node:
                again = post(
                    to_node,
                    "/api/v1/memories",
                    item.key,
                    body,
                    **{"Idempotency-Key": item.idempotency_key},
                )
            if again is not None and again.status_code not in UNANSWERED:
                item.replays.append((number, again.status_code, again.content))
                if number == 1 and load.node1_back_at:
                    with load.lock:
                        load.replays_on_node1_after_restart += 1
    with load.lock:
        load.stores.append(item)


def read_once(cluster: Cluster, client: httpx.Client, load: Load, n: int) -> None:
    path, body = ("/api/v1/search", {"query": "fact"}) if n % 2 else ("/api/v1/hydrate", {})
    response = post(client, path, cluster.keys.take(), body)
    status = None if response is None else response.status_code
    with load.lock:
        load.reads[status] += 1
        if status not in (200, None, *UNANSWERED):
            load.unexpected.append(f"{path}: {status} {response.text[:200]}")


def formation_once(cluster: Cluster, client: httpx.Client, load: Load) -> None:
    thread = f"t-{uuid.uuid4().hex[:12]}"
    marker = f"formation-{uuid.uuid4().hex[:8]}"
    body = {
        "messages": [
            {"role": "user", "content": f"Remember my code word: {marker}."},
            {"role": "assistant", "content": "Noted."},
        ],
        "extract": "now",
    }
    key, idem = cluster.keys.take(3), str(uuid.uuid4())
    for _ in range(3):
        response = post(
            client, f"/api/v1/threads/{thread}/messages", key, body, **{"Idempotency-Key": idem}
        )
        if response is not None and response.status_code not in UNANSWERED:
            if response.status_code in (200, 201, 202):
                with load.lock:
                    load.threads.append(thread)
            else:
                load.unexpected.append(f"ingest: {response.status_code} {response.text[:200]}")
            return


def race_once(cluster: Cluster, load: Load, clients: list[httpx.Client], memory_id: str) -> None:
    """Two clients PATCH the same memory with If-Match on the version both read."""
    with cluster.client() as reader:
        current = reader.get(f"/api/v1/memories/{memory_id}", headers=auth(cluster.keys.take()))
    if current.status_code != 200:
        return
    version = current.json()["memory"]["version"]
    start = threading.Barrier(2)
    statuses: list[int | None] = [None, None]

    def patch(index: int) -> None:
        key = cluster.keys.take()
        start.wait(10)
        with contextlib.suppress(httpx.TransportError):
            statuses[index] = (
                clients[index]
                .patch(
                    f"/api/v1/memories/{memory_id}",
                    json={"text": f"winner {index} of version {version}"},
                    headers=auth(key) | {"If-Match": f'"{version}"'},
                )
                .status_code
            )

    racers = [threading.Thread(target=patch, args=(i,)) for i in (0, 1)]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(30)
    after = until(lambda: _version(cluster, memory_id), 30, "the memory's version after a race")
    with load.lock:
        load.races.append(Race(memory_id, version, statuses, after))


def _version(cluster: Cluster, memory_id: str) -> int | None:
    with contextlib.suppress(httpx.HTTPError), cluster.client() as reader:
        response = reader.get(f"/api/v1/memories/{memory_id}", headers=auth(cluster.keys.take()))
        if response.status_code == 200:
            return response.json()["memory"]["version"]
    return None


def follow_feed(cluster: Cluster, load: Load, stop: threading.Event) -> None:
    """A follower of the change feed during the load: every page after the last cursor."""
    cursor = ""
    with cluster.client() as client:
        while not stop.is_set() or cursor == "":
            with contextlib.suppress(httpx.TransportError):
                page = client.get(
                    "/api/v1/events",
                    params={"after": cursor, "limit": 200} if cursor else {"limit": 200},
                    headers=auth(cluster.keys.take()),
                )
                if page.status_code == 200:
                    body = page.json()
                    with load.lock:
                        load.feed.extend(event["id"] for event in body["events"])
                    cursor = body["next_cursor"]
            stop.wait(0.05)


def watch_schedule(cluster: Cluster, stop: threading.Event) -> None:
    """Once the schedule's run of a period is there, the next period comes due (the test
    moves it, rather than wait a minute): two periods in the window."""
    with contextlib.suppress(psycopg.Error):  # the module's end dropped the database
        _watch_schedule(cluster, stop)


def _watch_schedule(cluster: Cluster, stop: threading.Event) -> None:
    for _ in range(2):
        while not stop.is_set():
            runs = cluster.sql(
                "SELECT count(*) FROM memories_jobrun WHERE job = 'purge_retention' "
                "AND trigger = 'schedule'"
            )[0][0]
            if runs >= len(cluster.schedule_due) + 1:
                break
            stop.wait(0.5)
        if stop.is_set() or len(cluster.schedule_due) == 1:
            return
        due = cluster.sql(
            "UPDATE django_q_schedule SET next_run = now() - interval '1 second' "
            "WHERE name = %s RETURNING next_run",
            [SCHEDULE],
        )[0][0]
        cluster.schedule_due.append(due)


@pytest.fixture(scope="module")
def load(cluster) -> Load:
    load = Load()
    stop, feed_stop = threading.Event(), threading.Event()
    schedule_stop = threading.Event()
    with cluster.client() as client:
        created = client.post(
            "/api/v1/webhooks", json={"url": cluster.receiver.url}, headers=auth(cluster.admin_key)
        )
        assert created.status_code == 201, created.text
        keyed = [
            client.post(
                "/api/v1/memories",
                json={"text": f"race {i}", "key": f"race.{i}"},
                headers=auth(cluster.keys.take()),
            ).json()["memory_id"]
            for i in range(3)
        ]

    def worker(number: int) -> None:
        with cluster.client() as client:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    store_once(cluster, client, load)
                    read_once(cluster, client, load, n)
                    if n % 4 == number % 4:
                        formation_once(cluster, client, load)
                except Exception as exc:  # noqa: BLE001 - reported by the tests
                    load.unexpected.append(f"worker {number}: {exc!r}")

    def racer() -> None:
        clients = [cluster.client(), cluster.client()]
        n = 0
        while not stop.is_set():
            try:
                race_once(cluster, load, clients, keyed[n % len(keyed)])
            except Exception as exc:  # noqa: BLE001
                load.unexpected.append(f"racer: {exc!r}")
            n += 1
        for client in clients:
            client.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    threads.append(threading.Thread(target=racer))
    follower = threading.Thread(target=follow_feed, args=(cluster, load, feed_stop))
    schedule = threading.Thread(target=watch_schedule, args=(cluster, schedule_stop), daemon=True)
    started = time.monotonic()
    for thread in [*threads, follower, schedule]:
        thread.start()
    try:
        until(lambda: len(load.stores) >= 30, 30, "stores before the kill")
        load.killed_at_db = cluster.sql("SELECT now()")[0][0]
        load.killed = cluster.nodes[0].kill()
        cluster.nodes[0].start()
        until(cluster.nodes[0].answering, 120, "node 1 again")
        load.node1_back_at = time.monotonic()
        until(
            lambda: (
                load.replays_on_node1_after_restart >= 5
                or time.monotonic() - started > LOAD_SECONDS
            ),
            LOAD_SECONDS + 60,
            "node 1 serving again",
        )
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
        feed_stop.set()
        follower.join(60)
    cluster.schedule_stop = schedule_stop  # type: ignore[attr-defined]
    return load


# --- under the load: what held ----------------------------------------------------------------


def test_no_acknowledged_write_is_lost_and_none_is_stored_twice(cluster, load):
    acknowledged = [item for item in load.stores if item.first and item.first[0] == 201]
    assert load.killed >= 3  # serve, its web server, its cluster (and their children)
    assert len(acknowledged) >= 30
    assert load.unexpected == []
    texts = dict(
        cluster.sql(
            "SELECT text, count(*) FROM memories_memory WHERE text LIKE 'fact %%' GROUP BY text"
        )
    )
    lost = [item.text for item in acknowledged if item.text not in texts]
    assert lost == []
    # Retried through nginx after a 502 or sent again to each node: still one memory each.
    assert {text: n for text, n in texts.items() if n != 1} == {}
    answered = {json.loads(item.first[1])["memory_id"] for item in acknowledged}
    assert len(answered) == len(acknowledged)


def test_each_idempotent_retry_on_another_node_answers_the_first_answer(load):
    acknowledged = [item for item in load.stores if item.first and item.first[0] == 201]
    replays = [(item, replay) for item in acknowledged for replay in item.replays]
    # Node 2 never went down: it answered every one; node 1 those sent while it was up.
    assert all(2 in {node for node, _, _ in item.replays} for item in acknowledged)
    assert {node for _, (node, _, _) in replays} == {1, 2}
    assert load.replays_on_node1_after_restart >= 1
    differing = [
        (item.text, node, status)
        for item, (node, status, body) in replays
        if (status, body) != item.first
    ]
    assert differing == []


def test_one_winner_per_compare_and_set_race(load):
    assert len(load.races) >= 5
    for race in load.races:
        won = race.statuses.count(200)
        answered = [status for status in race.statuses if status not in (None, *UNANSWERED)]
        assert set(answered) <= {200, 409}, race
        assert won <= 1, race
        # Both answered: exactly one won. The version moved once if anyone won (a request that
        # died with its node may still have won, unseen).
        if len(answered) == 2:
            assert sorted(answered) == [200, 409], race
        assert race.after in (race.version, race.version + 1), race
        if won:
            assert race.after == race.version + 1, race
    assert sum(race.statuses.count(200) for race in load.races) >= 5


def test_each_formation_run_is_applied_once(cluster, load):
    assert len(load.threads) >= 3
    manage = [*exec_start("systemd/memoryhub.service")[:2], "extract_threads"]
    env = cluster.nodes[1].env

    def open_runs() -> list[tuple]:
        return cluster.sql(
            "SELECT id, state FROM memories_extractionrun WHERE state IN ('queued', 'running')"
        )

    def settled() -> bool:
        """What an operator (or the every-minute schedule) does for runs the node that died
        left open: a running one goes back to the queue once its lease has expired (4 s here);
        a queued one whose task died with the node's cluster is run by hand."""
        left = open_runs()
        if not left:
            return True
        subprocess.run(manage, cwd=BASE_DIR, env=env, capture_output=True, timeout=120)
        for run_id, state in left:
            if state == "queued":
                subprocess.run(
                    [*manage, "--run", str(run_id)],
                    cwd=BASE_DIR,
                    env=env,
                    capture_output=True,
                    timeout=120,
                )
        return False

    # The clusters work through what was queued; then what is left was stranded by the kill.
    backlog = len(open_runs())
    with contextlib.suppress(AssertionError):
        until(lambda: len(open_runs()) <= 2, 5 + backlog * MODEL_SECONDS * 3, "the backlog")
    until(settled, 120, "every formation run finished", interval=1)
    runs = cluster.sql(
        "SELECT t.thread_id, r.state, r.attempts, r.counts FROM memories_extractionrun r "
        "JOIN memories_thread t ON t.id = r.thread_id"
    )
    assert {state for _, state, _, _ in runs} == {"done"}, runs
    assert set(load.threads) <= {thread for thread, _, _, _ in runs}
    facts = Counter(
        text
        for (text,) in cluster.sql(
            "SELECT text FROM memories_memory WHERE created_by = 'system:extract'"
        )
    )
    # One fact per conversation, each written once, however many times its run was claimed.
    assert len(facts) == len(runs), runs
    assert set(facts.values()) == {1}
    assert len(cluster.model.requests) >= len(runs)


def test_the_events_feed_is_gap_free_and_in_order(cluster, load):
    # The follower read during the load, across the kill: strictly increasing, no id twice.
    assert load.feed == sorted(set(load.feed))
    # Read again to its end now, every event of the tenant is there, and the follower's are
    # a prefix of them: nothing was skipped while writes committed out of order.
    events, cursor = [], ""
    with cluster.client() as client:
        while True:
            page = client.get(
                "/api/v1/events",
                params={"after": cursor, "limit": 200} if cursor else {"limit": 200},
                headers=auth(cluster.keys.take()),
            ).json()
            if not page["events"]:
                break
            events.extend(page["events"])
            cursor = page["next_cursor"]
    ids = [event["id"] for event in events]
    # An event's public id is the position the sequencer gave it once it committed (numbers
    # a killed sequencer drew are never used: a gap in the numbers, not a missing event).
    stored = cluster.sql("SELECT position FROM memories_event ORDER BY position")
    assert ids == [position for (position,) in stored]
    assert ids[: len(load.feed)] == load.feed
    created = Counter(event["memory_id"] for event in events if event["type"] == "memory.created")
    assert set(created.values()) == {1}


def test_each_webhook_event_is_delivered_and_once_without_faults(cluster, load):
    def delivered() -> Counter:
        with cluster.receiver.arrived:
            return Counter(json.loads(r.body)["id"] for r in cluster.receiver.received)

    events = {row[0] for row in cluster.sql("SELECT position FROM memories_event")}
    # A delivery that node 1 had claimed when it died is sent again by another node once the
    # claim has run out (two minutes): the test lets those claims run out now rather than wait.
    stranded = cluster.sql(
        "UPDATE memories_webhookdelivery SET next_attempt_at = now() WHERE state = 'pending' "
        "AND next_attempt_at > now() AND next_attempt_at <= %s RETURNING id",
        [load.killed_at_db + LEASE + dt.timedelta(seconds=1)],
    )
    # Without faults: each new event exactly once (their commits also start the dispatch).
    with cluster.client() as client:
        for i in range(10):
            response = client.post(
                "/api/v1/memories",
                json={"text": f"calm {i}", "dedup_policy": "insert"},
                headers=auth(cluster.keys.take()),
            )
            assert response.status_code == 201
    unnumbered = "SELECT count(*) FROM memories_event WHERE position IS NULL"
    until(lambda: cluster.sql(unnumbered)[0][0] == 0, 30, "the calm events numbered")
    calm = {row[0] for row in cluster.sql("SELECT position FROM memories_event")} - events
    assert len(calm) >= 10
    # Under the kill: every event at least once.
    until(lambda: events | calm <= set(delivered()), 90, "every event delivered")
    counts = delivered()
    assert {event: counts[event] for event in calm if counts[event] != 1} == {}
    print(f"deliveries stranded by the kill: {len(stranded)}")


def test_a_scheduled_job_runs_once_per_period(cluster, load):
    """django-q2's scheduler looks every 30 s in each cluster, so a bounded test sees two
    periods: the first due from the start, the second made due as soon as the first ran. Both
    clusters look; each period is run once (its due time is the run's `as_of`)."""
    until(lambda: len(cluster.schedule_due) == 1, 90, "the first period's run")

    def runs() -> list[tuple]:
        return cluster.sql(
            "SELECT as_of, status FROM memories_jobrun WHERE job = 'purge_retention' "
            "AND trigger = 'schedule' ORDER BY as_of"
        )

    until(lambda: len(runs()) >= 2, 90, "the second period's run")
    cluster.schedule_stop.set()
    # A run's row is written as it starts: wait for the ones under way to end.
    until(lambda: all(status != "running" for _, status in runs()), 90, "the runs' ends")
    done = runs()
    # More periods may have come due meanwhile (a minute each): each was run once.
    assert len({as_of for as_of, _ in done}) == len(done), done
    assert cluster.schedule_due[0] in {as_of for as_of, _ in done}
    assert {status for _, status in done} == {"ok"}


# --- the proxy: who the client is, and HTTPS --------------------------------------------------


def test_the_rate_limit_holds_whichever_node_a_request_reaches(cluster, load):
    key = cluster.keys.take(USES)  # a key of its own: its whole minute is this test's
    with cluster.client() as client:
        codes = [client.get("/api/v1/whoami", headers=auth(key)).status_code for _ in range(LIMIT)]
        # nginx takes turns: the next two reach one node each, and both refuse.
        refused = [client.get("/api/v1/whoami", headers=auth(key)) for _ in range(2)]
    assert codes == [200] * LIMIT
    assert [r.status_code for r in refused] == [429, 429]
    assert refused[0].json()["error"]["code"] == "RATE_LIMITED"
    # Whichever node: each refuses it directly too.
    for node in cluster.nodes:
        with direct(node) as to_node:
            assert to_node.get("/api/v1/whoami", headers=auth(key)).status_code == 429


def sign_in(client: httpx.Client, cluster: Cluster, password: str, **headers) -> int:
    page = client.get("/accounts/login/", headers=headers)
    assert page.status_code == 200, page.text[:300]
    token = client.cookies["csrftoken"]
    answer = client.post(
        "/accounts/login/",
        data={"username": EMAIL, "password": password, "csrfmiddlewaretoken": token},
        headers={"Referer": f"{cluster.https}/accounts/login/", **headers},
    )
    return answer.status_code


def test_failed_sign_ins_lock_the_client_behind_the_proxies_not_another(cluster, orm):
    from axes.models import AccessAttempt, AccessFailureLog, AccessLog

    a, b, c = "203.0.113.10", "203.0.113.20", "203.0.113.30"
    with cluster.client(LB) as balancer:
        failures = [sign_in(balancer, cluster, "wrong", **{"X-Forwarded-For": a}) for _ in range(5)]
        locked = sign_in(balancer, cluster, PASSWORD, **{"X-Forwarded-For": a})
    with cluster.client(LB) as balancer:
        other = sign_in(balancer, cluster, PASSWORD, **{"X-Forwarded-For": b})
    # A client sending the same header straight to nginx is no load balancer: its five failures
    # count under its own address, and client C is not locked out.
    with cluster.client(STRANGER) as stranger:
        spoofed = [sign_in(stranger, cluster, "wrong", **{"X-Forwarded-For": c}) for _ in range(5)]
    with cluster.client(LB) as balancer:
        victim = sign_in(balancer, cluster, PASSWORD, **{"X-Forwarded-For": c})

    # The form again with its error, then the fifth failure locks the pair out (429).
    assert failures == [200, 200, 200, 200, 429]
    assert locked == 429
    assert other == 302
    assert spoofed == [200, 200, 200, 200, 429]
    assert victim == 302
    attempts = dict(AccessAttempt.objects.values_list("ip_address", "failures_since_start"))
    # Counted under A (5, and the attempt made while locked) and under the stranger's own
    # address; never under B or C.
    assert set(attempts) == {a, STRANGER}
    assert attempts[a] >= 5 and attempts[STRANGER] == 5
    failed_from = set(AccessFailureLog.objects.values_list("ip_address", flat=True))
    assert failed_from == {a, STRANGER}
    assert set(AccessLog.objects.values_list("ip_address", flat=True)) == {b, c}


def test_forwarded_headers_from_an_untrusted_address_are_ignored(cluster):
    node = cluster.nodes[1]
    with direct(node, STRANGER) as stranger:
        response = stranger.get("/api/v1/", headers={"X-Forwarded-For": "203.0.113.40"})
    # Its X-Forwarded-Proto: https counted for nothing: plain HTTP, sent to HTTPS.
    assert response.status_code == 301
    assert response.headers["location"].startswith("https://")


def test_https_ended_at_the_proxy_does_not_loop(cluster):
    with cluster.client() as client:
        over_tls = client.get("/api/v1/")
    plain = httpx.get(f"{cluster.http}/api/v1/", follow_redirects=False)
    with direct(cluster.nodes[0]) as trusted:
        said_https = trusted.get("/api/v1/")
        said_http = trusted.get("/api/v1/", headers={"X-Forwarded-Proto": "http"})
    assert over_tls.status_code == 200
    assert over_tls.headers["strict-transport-security"].startswith("max-age=")
    assert plain.status_code == 301
    assert plain.headers["location"].startswith("https://localhost")
    assert said_https.status_code == 200
    assert said_http.status_code == 301


# --- MCP across nodes -------------------------------------------------------------------------


def test_a_kind_change_on_node_1_reaches_an_mcp_listener_on_node_2_across_a_dropped_listen(
    cluster,
):
    from memories.mcp.listen import APPLICATION_NAME

    node1, node2 = cluster.nodes
    listening = "SELECT pid FROM pg_stat_activity WHERE application_name = %s"

    def put_kind(name: str) -> None:
        with direct(node1) as to_node1:
            response = to_node1.put(
                f"/api/v1/kinds/{name}",
                json={"description": name, "schema": {"type": "object"}},
                headers=auth(cluster.admin_key),
            )
        assert response.status_code in (200, 201), response.text

    dropped: list[int] = []

    def drop_then_change() -> None:
        (pid,) = until(lambda: cluster.sql(listening, [APPLICATION_NAME]), 20, "the LISTEN")
        dropped.append(pid[0])
        cluster.sql("SELECT pg_terminate_backend(%s::int)", [pid[0]])
        put_kind("Receipt")  # most likely while the listener is away
        until(listening_again, 20, "node 2's listener back on a new connection")

    def listening_again() -> bool:
        pids = {pid for (pid,) in cluster.sql(listening, [APPLICATION_NAME])}
        return bool(pids) and dropped[0] not in pids

    first, second, tools = asyncio.run(
        listen_for_list_changes(
            node2.url,
            cluster.admin_key,
            [lambda: put_kind("Invoice"), drop_then_change],
            headers={"X-Forwarded-Proto": "https", "Host": "localhost"},
        )
    )
    assert isinstance(first, ToolsListChanged) and isinstance(second, ToolsListChanged)
    assert {"create_invoice", "create_receipt"} <= tools

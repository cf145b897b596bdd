"""`bench --load`: the mixed load against `serve`, end to end at a tiny size, and its summary.

No timing assertions (the figures are the bench's to report): the command runs, every
operation is answered without error, and the figures land in bench-results.json next to what
the file held.
"""

from __future__ import annotations

import configparser
import json
import random

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from bench import cpu, pgbouncer
from bench.corpus import CORPORA, WORDS
from bench.load import (
    KINDS,
    MIX,
    _ended_kind,
    _kind,
    node_workers,
    pooled_env,
    spread,
    summarise,
)
from bench.load_client import node_of
from bench.pair import PAIRS, side_env, side_of
from tests.support.bench import run_bench


def test_summary_counts_rates_and_errors_per_operation():
    results = [
        {
            "latencies": {"store": [10.0, 20.0], "search_hybrid": [5.0], "recall": [1.0]},
            "errors": {"store": {"503": 1}, "search_hybrid": {}, "recall": {}},
        },
        {
            "latencies": {"store": [30.0], "search_hybrid": [], "recall": [2.0, 3.0]},
            "errors": {"store": {}, "search_hybrid": {"ConnectionError": 2}, "recall": {}},
        },
    ]
    ops = summarise(results, duration=2.0)
    assert set(ops) == {*MIX, "all"}
    assert (ops["store"]["n"], ops["store"]["p50"], ops["store"]["req_per_s"]) == (3, 20.0, 1.5)
    assert ops["store"]["errors"] == 1 and ops["store"]["error_kinds"] == {"503": 1}
    assert ops["search_hybrid"]["errors"] == 2
    assert ops["all"]["n"] == 7 and ops["all"]["req_per_s"] == 3.5
    assert ops["all"]["error_kinds"] == {"503": 1, "ConnectionError": 2}


def _cpu(ppid: int, own: float, reaped: float = 0.0, cmdline: str = "") -> cpu.ProcessCPU:
    return cpu.ProcessCPU(ppid=ppid, own=own, reaped=reaped, cmdline=cmdline)


def test_cpu_by_kind_counts_new_live_and_ended_processes():
    before = {
        1: ("postgres background", _cpu(0, 100.0, reaped=50.0)),  # the postmaster
        2: ("postgres backends", _cpu(1, 40.0)),  # lives on
        3: ("postgres backends", _cpu(1, 30.0)),  # closes its connection meanwhile
        9: ("web", _cpu(8, 500.0)),
    }
    after = {
        1: ("postgres background", _cpu(0, 101.0, reaped=50.0 + 35.0 + 12.0)),
        2: ("postgres backends", _cpu(1, 47.0)),
        4: ("postgres backends", _cpu(1, 6.0)),  # opened meanwhile
        9: ("web", _cpu(8, 520.0)),
    }
    # Backend 3 ended at 35 ms (5 of them after `before`); another opened and closed in between
    # (12 ms): both reaped by the postmaster.
    spent = cpu.kinds_delta_ms(before, after, _ended_kind)
    assert spent == {
        "postgres background": 1.0,
        "postgres backends": 7.0 + 6.0,
        "postgres ended": 5.0 + 12.0,
        "web": 20.0,
    }


def test_processes_are_told_apart_by_their_place_and_command_line():
    def kind(root, pid, cmdline, root_pid=1):
        return _kind(root, pid, _cpu(root_pid, 0.0, cmdline=cmdline), root_pid)

    assert kind("postgres", 1, "/usr/lib/postgresql/bin/postgres -D /x") == "postgres background"
    assert kind("postgres", 2, "postgres: checkpointer ") == "postgres background"
    assert kind("postgres", 3, "postgres: autovacuum worker memoryhub") == "postgres background"
    assert kind("postgres", 4, "postgres: postgres memoryhub [local] idle") == "postgres backends"
    assert kind("serve", 1, "python manage.py serve --port 1") == "serve"
    assert kind("serve", 5, "python manage.py qcluster") == "cluster"
    assert kind("serve", 6, "python -m uvicorn memoryhub.asgi:application") == "web"
    assert {_kind("serve", 6, _cpu(1, 0.0), 1), "postgres backends"} <= set(KINDS)


@pytest.mark.django_db
def test_small_vocabulary_questions_share_a_word_with_most_memories():
    corpus = CORPORA["small-vocabulary"]
    rng = random.Random(1)
    facts = [corpus.fact(rng, i) for i in range(400)]
    queries = [corpus.query(rng) for _ in range(100)]
    again = random.Random(1)
    assert [corpus.fact(again, i) for i in range(3)] == facts[:3]  # deterministic for a seed
    assert len(WORDS) == len(set(WORDS)) == 300
    with connection.cursor() as cursor:
        # Every word is a lexeme of its own (no stop word): each one counts for full text.
        cursor.execute(
            "SELECT count(*) FROM unnest(%s::text[]) w WHERE length(to_tsvector('english', w)) = 1",
            [WORDS],
        )
        assert cursor.fetchone()[0] == 300
        cursor.execute(
            "SELECT avg(m) FROM (SELECT avg((to_tsvector('english', f) @@ "
            "replace(plainto_tsquery('english', q)::text, '&', '|')::tsquery)::int) AS m "
            "FROM unnest(%s::text[]) q, unnest(%s::text[]) f GROUP BY q) per_query",
            [queries, facts],
        )
        share = cursor.fetchone()[0]
    assert 0.5 < share < 0.95, share  # a question's words match most of the memories


@pytest.mark.slow
def test_bench_load_runs_against_serve_and_writes_its_figures(tmp_path):
    output = tmp_path / "bench-results.json"
    output.write_text(json.dumps({"latency": {"kept": True}}))
    completed = run_bench(
        "--load",
        "--clients",
        "2",
        "--duration",
        "2",
        "--embedder",
        "hashing",
        "--corpus",
        "small-vocabulary",
        "--workers",
        "1",
        "--agents",
        "1",
        "--statements",
        "--output",
        str(output),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(output.read_text())
    assert results["latency"] == {"kept": True}  # the other figures stay
    load = results["load"]["hashing/small-vocabulary/1 workers/1 agents/statements"]
    assert (load["clients"], load["duration_s"], load["embedder"]) == (2, 2.0, "hashing")
    # --agents 1: one agent seeded, both clients working as it (without errors, below).
    assert (load["agents"], load["seeded_memories"]) == (1, 500)
    assert (load["corpus"], load["workers"]) == ("small-vocabulary", 1)
    by_kind = load["cpu_ms_per_request"]
    assert set(by_kind) == {*KINDS, "clients"}
    assert by_kind["web"] > 0 and by_kind["postgres backends"] > 0 and by_kind["clients"] > 0
    assert load["postgres_backends"]["at_end"] > 0
    assert load["postgres_settings"]["max_connections"]
    on = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    assert load["postgres"] == on  # PostgreSQL as installed, not the tests' settings
    for op in ("store", "search_hybrid", "recall", "all"):
        row = load["operations"][op]
        assert row["n"] > 0 and row["p50"] > 0 and row["req_per_s"] > 0, op
        assert row["errors"] == 0, (op, row["error_kinds"])
    assert "mixed load: 2 clients on 1 agents" in completed.stdout
    assert "corpus small-vocabulary, 1 web workers" in completed.stdout
    assert "CPU ms per request: web " in completed.stdout
    assert "search_hybrid" in completed.stdout
    # --statements: PostgreSQL's time by statement over the timed window, the bench's own
    # statements left out, texts normalised (no value a request sent).
    by_statement = load["statements"]
    assert by_statement["requests"] == load["operations"]["all"]["n"] > 0
    assert by_statement["ms_per_request"] > 0 and by_statement["statements_per_request"] >= 2
    top = by_statement["top"]
    assert sum(row["share"] for row in top) == pytest.approx(1.0, abs=0.01)
    queries = " ".join(row["query"] for row in top)
    assert "kw_lex" in queries  # the hybrid ranking
    assert 'INSERT INTO "memories_memory"' in queries  # a store
    assert "pg_stat_statements" not in queries
    assert "$1" in queries
    ranking = next(row for row in top if "kw_lex" in row["query"])
    assert ranking["calls_per_request"] > 0 and ranking["exec_ms_per_request"] > 0
    # One agent of 500 memories: a small scope, whose exact ranking runs its generic plan
    # (planned once per connection, not per search: `search.small_scope`).
    assert ranking["plan_ms_per_request"] < ranking["exec_ms_per_request"]
    assert "PostgreSQL time per request:" in completed.stdout


@pytest.mark.slow
def test_bench_load_pair_runs_both_sides_at_once_and_writes_their_figures(tmp_path):
    output = tmp_path / "bench-results.json"
    completed = run_bench(
        "--load",
        "--pair",
        "observability",
        "--clients",
        "2",
        "--duration",
        "2",
        "--embedder",
        "hashing",
        "--workers",
        "1",
        "--output",
        str(output),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    pair = json.loads(output.read_text())["load"]["hashing/1 workers/pair observability"]
    assert pair["pair"] == "observability" and pair["clients"] == 2 and pair["rounds"] == 2
    assert pair["workers"] == 1
    assert len(pair["on_over_off"]["throughput_by_round"]) == 2
    off, on = pair["sides"]["off"], pair["sides"]["on"]
    assert off["clients"] == on["clients"] == 1
    assert off["env"]["MEMORYHUB_BENCH_NO_EVENTS"] == "1" and on["on"] == list(
        PAIRS["observability"]
    )
    assert off["env"]["MEMORYHUB_METRICS_TOKEN"] is None and off["on"] == []
    assert on["env"]["MEMORYHUB_METRICS_TOKEN"] == "set"  # the token itself is not written
    assert on["env"]["MEMORYHUB_BENCH_NO_EVENTS"] is None
    for side in (off, on):
        row = side["operations"]["all"]
        assert row["n"] > 0 and row["req_per_s"] > 0 and row["errors"] == 0, row["error_kinds"]
        assert side["web_cpu_ms_per_request"] > 0  # each server's own processes were found
    assert pair["postgres_cpu_ms_per_request"] > 0
    assert pair["on_over_off"]["throughput"] > 0 and pair["on_over_off"]["web_cpu"] > 0
    assert "paired mixed load: 2 clients split between two servers of 1 web workers, 2 rounds" in (
        completed.stdout
    )
    assert "round 2 of 2: on started first" in completed.stdout
    assert "on / off: throughput" in completed.stdout


def test_statements_are_not_read_for_a_pair():
    with pytest.raises(CommandError, match="not with --pair"):
        call_command("bench", "--load", "--pair", "same", "--statements", "--clients", "2")


def test_clients_are_spread_over_the_agents_seeded_in_turn():
    a, b = {"key": "a"}, {"key": "b"}
    assert spread([a, b], 5) == [a, b, a, b, a]  # fewer agents than clients: shared
    assert spread([a, b], 1) == [a]  # more: the others only hold data


def test_agents_must_be_positive_and_not_with_a_pair():
    with pytest.raises(CommandError, match="--agents must be positive"):
        call_command("bench", "--load", "--agents", "0")
    with pytest.raises(CommandError, match="not with --pair"):
        call_command("bench", "--load", "--pair", "same", "--agents", "2", "--clients", "2")


def test_pair_sides_alternate_and_differ_only_in_what_the_pair_names():
    assert [side_of(i) for i in range(4)] == ["off", "on", "off", "on"]
    assert [side_of(i, 1) for i in range(4)] == ["on", "off", "on", "off"]  # the second round
    off, on = side_env("off"), side_env("on")
    assert set(off) == set(on)
    assert off["MEMORYHUB_METRICS_TOKEN"] is None and on["MEMORYHUB_METRICS_TOKEN"]
    assert (off["MEMORYHUB_ACCESS_LOG"], on["MEMORYHUB_ACCESS_LOG"]) == ("0", "1")
    assert (off["LOG_LEVEL"], on["LOG_LEVEL"]) == ("WARNING", "INFO")  # its lines are written
    assert (off["MEMORYHUB_BENCH_NO_EVENTS"], on["MEMORYHUB_BENCH_NO_EVENTS"]) == ("1", None)
    assert off["PROMETHEUS_MULTIPROC_DIR"] is on["PROMETHEUS_MULTIPROC_DIR"] is None  # serve's own
    events = side_env("on", "events")
    assert events["MEMORYHUB_BENCH_NO_EVENTS"] is None and events["MEMORYHUB_ACCESS_LOG"] == "0"
    assert events["MEMORYHUB_METRICS_TOKEN"] is None
    assert side_env("on", "same") == side_env("off", "same") == side_env("off")


def test_each_client_sends_its_requests_to_each_node_in_turn_from_its_own():
    assert [node_of(r, client=0, nodes=2) for r in range(1, 5)] == [1, 0, 1, 0]
    assert [node_of(r, client=1, nodes=2) for r in range(1, 5)] == [0, 1, 0, 1]
    # Six clients' first requests reach three nodes evenly (no herd on node 0).
    assert sorted(node_of(1, client=c, nodes=3) for c in range(6)) == [0, 0, 1, 1, 2, 2]
    assert {node_of(r, client=5, nodes=1) for r in range(10)} == {0}


def test_nodes_share_the_web_processes_one_server_would_run(monkeypatch):
    monkeypatch.setenv("WEB_CONCURRENCY", "4")
    assert [node_workers(None, n) for n in (1, 2, 3, 8)] == [4, 2, 1, 1]  # one each at least
    assert node_workers(3, 2) == 3  # --workers: each node's


def test_pooled_nodes_reach_the_pooler_in_transaction_mode_and_listen_directly():
    direct = {"HOST": "/tmp/pg", "PORT": "5432", "USER": "postgres", "NAME": "memoryhub"}
    env = pooled_env("postgres://postgres@127.0.0.1:6432/memoryhub", direct)
    assert env["DATABASE_URL"] == "postgres://postgres@127.0.0.1:6432/memoryhub"
    assert env["MEMORYHUB_DB_POOL_MODE"] == "transaction"
    assert env["MEMORYHUB_DIRECT_DATABASE_URL"] == (
        "host=/tmp/pg port=5432 user=postgres dbname=memoryhub"
    )


def test_pgbouncer_config_pools_by_transaction_in_front_of_the_server(tmp_path):
    ini = pgbouncer.config(
        port=6432,
        host="/tmp/pg",
        server_port="5432",
        user="postgres",
        dbname="memoryhub",
        auth_file=tmp_path / "users.txt",
    )
    parsed = configparser.ConfigParser()
    parsed.read_string(ini)
    assert parsed["databases"]["memoryhub"] == (
        "host=/tmp/pg port=5432 dbname=memoryhub user=postgres"
    )
    bouncer = parsed["pgbouncer"]
    assert (bouncer["pool_mode"], bouncer["listen_addr"], bouncer["listen_port"]) == (
        "transaction",
        "127.0.0.1",
        "6432",
    )
    assert bouncer["default_pool_size"] == str(pgbouncer.POOL_SIZE)
    assert bouncer["unix_socket_dir"] == ""  # no socket in /tmp beside another PgBouncer's
    assert bouncer["auth_file"] == str(tmp_path / "users.txt")


def test_pgbouncer_is_found_on_the_path_given_or_not_at_all(tmp_path):
    assert pgbouncer.find_pgbouncer(str(tmp_path)) is None
    program = tmp_path / "pgbouncer"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert pgbouncer.find_pgbouncer(str(tmp_path)) == str(program)


def test_nodes_and_pgbouncer_options_are_checked_before_anything_starts(monkeypatch):
    with pytest.raises(CommandError, match="--nodes must be positive"):
        call_command("bench", "--load", "--nodes", "0")
    with pytest.raises(CommandError, match="not with --pair"):
        call_command("bench", "--load", "--pair", "same", "--nodes", "2", "--clients", "2")
    with pytest.raises(CommandError, match="not with --pair"):
        call_command("bench", "--load", "--pair", "same", "--pgbouncer", "--clients", "2")
    with pytest.raises(CommandError, match="--pgbouncer implies it"):
        call_command("bench", "--load", "--pgbouncer", "--transaction-mode")
    monkeypatch.setattr("bench.commands.bench.find_pgbouncer", lambda: None)
    with pytest.raises(CommandError, match="needs PgBouncer, which is not installed"):
        call_command("bench", "--load", "--pgbouncer")

"""`bench --versus-mem0`: the side-by-side with mem0, against a mem0 stand-in on loopback
(tests/support/mem0_standin.py) and MemoryHub's real `serve`, at a tiny size.

What is checked: the requests each side is sent (bodies, ids, filters, key), that the two
systems take turns (request by request, block by block, round by round in the mixed load, the
first of each pair alternating), and the report: its shape, its ratios (mem0's time over
MemoryHub's; the mixed load's throughput and CPU per request, MemoryHub's over mem0's) and both
systems' evidence recall on the questions asked. No timing assertions: the figures are the
bench's to report.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import socket
from collections import Counter

import pytest

from bench import locomo
from bench.versus import (
    BLOCK,
    PHASES,
    WARMUP,
    Timer,
    _faster,
    mixed_options,
    parse_phases,
    round_robin,
)
from bench.versus_mixed import (
    MIXED_MIX,
    MixedPools,
    draw,
    mem0_processes,
    mixed_ratios,
    mixed_request,
    summarise_mixed,
)
from bench.versus_sides import TOP_K, BenchRequestError, Mem0Side, MemoryHubSide, order_of
from tests.support.bench import run_bench, throwaway_dir
from tests.support.mem0_standin import Mem0StandIn

ANIMALS = [f"creature{i}" for i in range(BLOCK + 8)]  # one word no other turn has, each turn


def _dataset() -> list[dict]:
    """Two conversations: the first with more turns than a bulk block (so the load takes turns
    block by block), each question naming its evidence turn's own word."""
    first = [
        {"speaker": "Ana", "dia_id": f"D1:{i + 1}", "text": f"I keep a {word} in the garden."}
        for i, word in enumerate(ANIMALS)
    ]
    second = [
        {"speaker": "Ben", "dia_id": "D1:1", "text": "My pottery teacher lives in Porto."},
        {"speaker": "Cy", "dia_id": "D1:2", "text": "The lighthouse keeper paints seagulls."},
    ]
    return [
        {
            "sample_id": "conv-a",
            "conversation": {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": first},
            "qa": [
                {"question": "Where is creature3 kept?", "evidence": ["D1:4"], "category": 4},
                {"question": "Who keeps creature17?", "evidence": ["D1:18"], "category": 1},
                {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},
            ],
        },
        {
            "sample_id": "conv-b",
            "conversation": {"session_1_date_time": "2:00 pm on 9 May, 2023", "session_1": second},
            "qa": [
                {"question": "Where does the pottery teacher live?", "evidence": ["D1:1"]},
                {"question": "What does the lighthouse keeper paint?", "evidence": ["D1:2"]},
            ],
        },
    ]


def _alternates(order: str) -> bool:
    """Pairs of one request (or block) each, the first of each pair alternating: HM MH HM ..."""
    pairs = [order[i : i + 2] for i in range(0, len(order), 2)]
    return all(set(p) == {"H", "M"} for p in pairs) and all(
        a[0] != b[0] for a, b in itertools.pairwise(pairs)
    )


@pytest.mark.slow
def test_versus_mem0_interleaves_both_systems_and_reports_their_figures(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(_dataset()))
    output = tmp_path / "bench-results.json"
    output.write_text(json.dumps({"latency": {"kept": True}}))
    requests = 4
    with Mem0StandIn(key="mem0-admin-key-0123456789") as mem0:
        completed = run_bench(
            "--versus-mem0",
            mem0.url + "/",
            "--mem0-key",
            "mem0-admin-key-0123456789",
            "--requests",
            str(requests),
            "--locomo",
            str(path),
            "--embedder",
            "hashing",
            "--workers",
            "1",
            "--output",
            str(output),
            "--mixed-duration",
            "1",
            "--clients",
            "2",
            "--mem0-data",
            str(tmp_path / "no-mem0-here"),
        )
    assert completed.returncode == 0, completed.stderr[-3000:] + completed.stdout[-3000:]
    results = json.loads(output.read_text())
    assert results["latency"] == {"kept": True}  # the file's other figures stay
    result = results["versus_mem0"]
    turns = len(ANIMALS) + 2
    assert (result["turns"], result["conversations"], result["requests"]) == (turns, 2, requests)
    prefix = result["mem0"]["user_id_prefix"]
    assert result["mem0"]["url"] == mem0.url  # the trailing slash dropped
    assert result["memoryhub"]["env"] == {
        "MEMORYHUB_EMBEDDING_CACHE": "0",
        "MEMORYHUB_EMBEDDING_SHARED_CACHE": "0",
    }
    assert result["memoryhub"]["workers"] == 1
    assert result["memoryhub"]["embedding_model"] == "hashing-v1"
    assert result["postgres"] == {
        "fsync": "on",
        "synchronous_commit": "on",
        "full_page_writes": "on",
    }

    # What mem0 was sent: every request with its key; the mixed load's requests come last.
    assert {r["key"] for r in mem0.requests} == {"mem0-admin-key-0123456789"}
    sequential = turns + 3 * (WARMUP + requests)
    earlier, mixed_sent = mem0.requests[:sequential], mem0.requests[sequential:]
    adds = [r for r in earlier if r["path"] == "/memories"]
    searches = [r for r in earlier if r["path"] == "/search"]
    assert len(earlier) == len(adds) + len(searches)
    bulk, writes = adds[:turns], adds[turns:]
    data = locomo.load(path)
    sent = sorted((b["body"]["user_id"], b["body"]["metadata"]["dia_id"]) for b in bulk)
    expected = sorted((f"{prefix}-{c.sample_id}", t.dia_id) for c in data for t in c.turns)
    assert sent == expected  # each turn once, into its conversation's user
    for request in bulk:
        body = request["body"]
        assert body["infer"] is False and len(body["messages"]) == 1
        assert body["messages"][0]["role"] == "user"
        assert body["metadata"]["thread_id"] == "session-1"
    first = next(b["body"] for b in bulk if b["body"]["metadata"]["dia_id"] == "D1:1")
    assert first["messages"][0]["content"] in {
        "Ana: I keep a creature0 in the garden.",
        "Ben: My pottery teacher lives in Porto.",
    }
    # The sequential writes: warm-up and timed, one user of their own, the turns in turn.
    assert len(writes) == WARMUP + requests
    assert {w["body"]["user_id"] for w in writes} == {f"{prefix}-writes"}
    assert [w["body"]["messages"][0]["content"] for w in writes[:3]] == [
        "Ana: I keep a creature0 in the garden.",
        "Ben: My pottery teacher lives in Porto.",
        "Ana: I keep a creature1 in the garden.",
    ]
    assert all("metadata" not in w["body"] and w["body"]["infer"] is False for w in writes)
    # Searches: the hybrid phase then the semantic one, the same questions, each filtered to
    # its conversation's user, top 10 (questions of both conversations in turn).
    assert len(searches) == 2 * (WARMUP + requests)
    asked = [(s["body"]["query"], s["body"]["filters"]) for s in searches]
    assert asked[: WARMUP + requests] == asked[WARMUP + requests :]
    assert asked[:4] == [
        ("Where is creature3 kept?", {"user_id": f"{prefix}-conv-a"}),
        ("Where does the pottery teacher live?", {"user_id": f"{prefix}-conv-b"}),
        ("Who keeps creature17?", {"user_id": f"{prefix}-conv-a"}),
        ("What does the lighthouse keeper paint?", {"user_id": f"{prefix}-conv-b"}),
    ]
    assert {s["body"]["top_k"] for s in searches} == {TOP_K}

    # The two systems took turns, the first of each pair alternating.
    phases = result["phases"]
    assert list(phases) == list(PHASES) == result["phases_run"]  # all by default
    assert phases["bulk"]["order"] == "HMMH"  # two blocks
    for phase in ("write", "search_hybrid", "search_semantic"):
        order = phases[phase]["order"]
        assert len(order) == 2 * requests and _alternates(order), (phase, order)
        # The timed requests begin after WARMUP (odd): mem0 went first in the first of them.
        assert order.startswith("MH")
    # The figures and their ratios: mem0's time over MemoryHub's.
    for phase in ("bulk", "write", "search_hybrid", "search_semantic"):
        row = phases[phase]
        for name in ("memoryhub", "mem0"):
            assert row[name]["p50"] > 0 and row[name]["p95"] >= row[name]["p50"], (phase, name)
        expected_n = turns if phase == "bulk" else requests
        assert row["memoryhub"]["n"] == row["mem0"]["n"] == expected_n, phase
        for stat in ("p50", "p95"):
            ratio = round(row["mem0"][stat] / row["memoryhub"][stat], 2)
            assert row["faster"][stat] == ratio, (phase, stat)
        assert row["faster"]["target_met"] is (row["faster"]["p50"] >= 2.0)
    bulk_row = phases["bulk"]
    assert bulk_row["memoryhub"]["stored"] == bulk_row["mem0"]["stored"] == turns
    rates = [bulk_row[name]["memories_per_s"] for name in ("memoryhub", "mem0")]
    assert bulk_row["faster"]["throughput"] == round(rates[0] / rates[1], 2)
    # Recall on the questions asked: each names its evidence's own word, so both find it all.
    recall = result["recall"]
    assert (recall["questions"], recall["distinct_questions"]) == (requests, 4)
    assert recall["mem0"]["hybrid"]["R@1"] == recall["mem0"]["semantic"]["R@1"] == 100.0
    assert recall["memoryhub"]["hybrid"]["R@10"] == 100.0
    assert set(recall["memoryhub"]["semantic"]) == {"R@1", "R@5", "R@10"}

    assert "side by side with mem0" in completed.stdout
    assert "search_semantic" in completed.stdout and "evidence recall" in completed.stdout
    assert "bulk load: MemoryHub" in completed.stdout

    # The mixed load: stores into the conversations' users, searches filtered to them, reads of
    # memories the bulk load stored; two rounds of each system, alternating.
    mixed = phases["mixed"]
    assert (mixed["order"], mixed["clients"], mixed["duration_s"]) == ("HMMH", 2, 1.0)
    users = {f"{prefix}-conv-a", f"{prefix}-conv-b"}
    bulk_ids = {item["id"] for user in users for item in mem0.memories[user][: 2 * turns]}
    kinds = Counter()
    for request in mixed_sent:
        if request["path"] == "/memories":
            kinds["store"] += 1
            assert request["body"]["user_id"] in users and request["body"]["infer"] is False
        elif request["path"] == "/search":
            kinds["search"] += 1
            assert request["body"]["filters"]["user_id"] in users
        else:
            kinds["read"] += 1
            assert request["body"] is None
            assert request["path"].removeprefix("/memories/") in bulk_ids
    assert set(kinds) == {"store", "search", "read"}
    for name in ("memoryhub", "mem0"):
        row = mixed[name]
        assert row["errors"] == 0 and row["n"] == row["answered"] > 0, name
        assert row["n"] == sum(op["n"] for op in row["by_operation"].values()), name
        assert row["req_per_s"] == round(row["n"] / row["seconds"], 1), name
        assert row["p99"] >= row["p50"] > 0, name
    assert mixed["mem0"]["n"] <= len(mixed_sent)  # the warm-up's requests are not counted
    # MemoryHub's CPU is read from its server and PostgreSQL; mem0's folder is not there.
    hub_cpu = mixed["memoryhub"]["cpu_ms_per_request"]
    assert hub_cpu["server"] > 0 and hub_cpu["postgres"] > 0
    assert abs(hub_cpu["total"] - hub_cpu["server"] - hub_cpu["postgres"]) <= 0.011
    assert mixed["mem0"]["cpu_ms_per_request"]["total"] is None
    assert result["mem0"]["processes_measured"] is None
    ratios = mixed["ratios"]
    rates = mixed["memoryhub"]["req_per_s"], mixed["mem0"]["req_per_s"]
    assert ratios["throughput"] == round(rates[0] / rates[1], 2)
    assert ratios["cpu_per_request"] is None and ratios["cpu_per_request_met"] is False
    assert "mixed load, MemoryHub/mem0: throughput" in completed.stdout
    assert "CPU per request None (target <= 0.3: unknown)" in completed.stdout
    assert not throwaway_dir(completed.stdout).exists()


def test_a_failing_mem0_stops_the_bench_with_what_it_answered():
    with Mem0StandIn() as mem0:
        mem0.fail_with = 500
        side = Mem0Side(mem0.url, "k" * 16, "tag", ["conv-a"])
        timer = Timer(side)
        try:
            with pytest.raises(BenchRequestError, match=r"mem0 POST /search: 500 .*told to fail"):
                timer.send(side.search(0, "anything", "hybrid"))
        finally:
            timer.close()
    assert mem0.requests[0]["body"] == {
        "query": "anything",
        "filters": {"user_id": "tag-conv-a"},
        "top_k": TOP_K,
    }
    assert mem0.requests[0]["key"] == "k" * 16


def test_a_mem0_without_a_key_is_sent_none_and_its_refusal_stops_the_bench():
    with Mem0StandIn(key="the-right-key-0123456") as mem0:
        side = Mem0Side(mem0.url, None, "tag", ["conv-a"])
        timer = Timer(side)
        try:
            with pytest.raises(BenchRequestError, match="401"):
                timer.send(side.write("hello"))
        finally:
            timer.close()
    assert mem0.requests[0]["key"] is None


def test_turns_alternate_and_questions_come_round_robin():
    assert [order_of(i) for i in range(3)] == [
        ("memoryhub", "mem0"),
        ("mem0", "memoryhub"),
        ("memoryhub", "mem0"),
    ]
    assert list(round_robin([["a1", "a2", "a3"], ["b1"], []])) == [
        (0, "a1"),
        (1, "b1"),
        (0, "a2"),
        (0, "a3"),
    ]


def test_faster_is_mem0s_time_over_memoryhubs_and_the_target_is_two_at_p50():
    figures = {"memoryhub": {"p50": 10.0, "p95": 20.0}, "mem0": {"p50": 25.0, "p95": 30.0}}
    assert _faster(figures) == {"p50": 2.5, "p95": 1.5, "target_met": True}
    figures["mem0"]["p50"] = 19.9
    assert _faster(figures)["target_met"] is False


def test_a_connection_the_server_closed_while_idle_is_opened_again_and_the_request_sent():
    with Mem0StandIn() as mem0:
        side = Mem0Side(mem0.url, None, "tag", ["conv-a"])
        timer = Timer(side)
        try:
            timer.send(side.write("first"))
            # As uvicorn does with a keep-alive connection idle for 5 s: closed on its side.
            timer.client.connection.sock.shutdown(socket.SHUT_RDWR)
            ms, status, answer = timer.send(side.write("second"))
        finally:
            timer.close()
    assert status == 200 and answer["results"][0]["memory"] == "second" and ms > 0
    assert [r["body"]["messages"][0]["content"] for r in mem0.requests] == ["first", "second"]


def test_phases_default_to_all_keep_their_order_and_those_reading_the_bulk_load_need_it():
    assert parse_phases(None) == parse_phases("") == PHASES
    assert parse_phases("mixed, bulk") == ("bulk", "mixed")
    assert parse_phases("write") == ("write",)
    with pytest.raises(ValueError, match=r"unknown phase.*mixd"):
        parse_phases("bulk,mixd")
    with pytest.raises(ValueError, match=r"mixed read.*add bulk"):
        parse_phases("mixed")
    with pytest.raises(ValueError, match="search_hybrid read"):
        parse_phases("write,search_hybrid")


def test_mixed_draws_follow_the_mix_and_a_seed_draws_the_same_requests_again():
    rng = random.Random("48-0-3")
    first = [draw(rng) for _ in range(20_000)]
    rng = random.Random("48-0-3")
    assert [draw(rng) for _ in range(20_000)] == first
    shares = Counter(operation for operation, _ in first)
    for operation, percent in MIXED_MIX.items():
        assert abs(100 * shares[operation] / len(first) - percent) < 1.5, operation
    assert len({pick for _, pick in first}) > 19_000  # the picks vary


def test_a_mixed_request_is_the_same_turn_question_or_nth_memory_for_both_systems():
    hub = MemoryHubSide("http://127.0.0.1:1", ["key-a", "key-b"], "key-w")
    mem0 = Mem0Side("http://127.0.0.1:2", "m" * 16, "tag", ["conv-a", "conv-b"])
    pools = MixedPools(
        turns=[(0, "Ana: hello"), (1, "Ben: hi")],
        questions=[(0, "Who said hello?"), (1, "Who said hi?")],
        stored={"memoryhub": [(0, "h1"), (1, "h2"), (1, "h3")], "mem0": [(0, "m1"), (1, "m2")]},
    )
    store = mixed_request(hub, pools, "store", 3)
    assert (store.method, store.path, store.body) == (
        "POST",
        "/api/v1/memories",
        {"text": "Ben: hi"},
    )
    assert store.headers == {"Authorization": "Bearer key-b"}
    store = mixed_request(mem0, pools, "store", 3)
    assert (store.path, store.body["user_id"], store.body["infer"]) == (
        "/memories",
        "tag-conv-b",
        False,
    )
    assert store.body["messages"] == [{"role": "user", "content": "Ben: hi"}]
    search = mixed_request(hub, pools, "search", 4)
    assert search.body == {"query": "Who said hello?", "mode": "hybrid", "limit": TOP_K}
    assert search.headers == {"Authorization": "Bearer key-a"}
    search = mixed_request(mem0, pools, "search", 4)
    assert search.body == {
        "query": "Who said hello?",
        "filters": {"user_id": "tag-conv-a"},
        "top_k": TOP_K,
    }
    read = mixed_request(hub, pools, "read", 2)
    assert (read.method, read.path, read.body) == ("GET", "/api/v1/memories/h3", None)
    assert read.headers == {"Authorization": "Bearer key-b"}
    read = mixed_request(mem0, pools, "read", 3)  # each system's own list, cycled
    assert (read.method, read.path, read.body) == ("GET", "/memories/m2", None)
    assert read.headers == {"X-API-Key": "m" * 16}


def test_a_mixed_summary_counts_answers_and_errors_and_splits_cpu_per_request():
    tally = [
        ({"store": [10.0, 12.0], "search": [20.0], "read": [2.0]}, {}),
        ({"store": [11.0], "search": [30.0, 25.0], "read": [3.0]}, {"500": 1, "TimeoutError": 1}),
    ]
    spent = {"web": 300.0, "serve": 20.0, "cluster": 10.0, "postgres backends": 90.0}
    spent |= {"postgres background": 5.0, "postgres ended": 5.0}
    row = summarise_mixed(tally, 2.0, spent)
    assert (row["n"], row["answered"], row["errors"]) == (8, 10, 2)
    assert row["error_kinds"] == {"500": 1, "TimeoutError": 1}
    assert row["req_per_s"] == 4.0  # answered well, per second
    assert row["by_operation"]["search"]["n"] == 3 and row["by_operation"]["read"]["p50"] == 2.0
    assert (row["p50"], row["p99"]) == (12.0, 30.0)  # of 2, 3, 10, 11, 12, 20, 25, 30
    # CPU per request answered: 330 ms of the server's processes, 100 of PostgreSQL's, 10 answers.
    assert row["cpu_ms_per_request"] == {"server": 33.0, "postgres": 10.0, "total": 43.0}
    assert summarise_mixed(tally, 2.0, None)["cpu_ms_per_request"]["total"] is None


def test_mixed_ratios_are_memoryhubs_over_mem0s_against_four_times_and_three_tenths():
    def row(rate, total):
        return {"req_per_s": rate, "cpu_ms_per_request": {"total": total}}

    ratios = mixed_ratios(row(200.0, 6.0), row(40.0, 30.0))
    assert ratios == {
        "throughput": 5.0,
        "throughput_target": 4.0,
        "throughput_met": True,
        "cpu_per_request": 0.2,
        "cpu_per_request_target": 0.3,
        "cpu_per_request_met": True,
    }
    ratios = mixed_ratios(row(150.0, 10.0), row(40.0, 30.0))
    assert (ratios["throughput"], ratios["throughput_met"]) == (3.75, False)
    assert (ratios["cpu_per_request"], ratios["cpu_per_request_met"]) == (0.333, False)
    unknown = mixed_ratios(row(150.0, 10.0), row(0.0, None))
    assert unknown["throughput"] is None and unknown["cpu_per_request"] is None
    assert not unknown["throughput_met"] and not unknown["cpu_per_request_met"]


def test_mem0s_processes_are_read_from_its_data_folder_those_running_only(tmp_path):
    assert mem0_processes(None) == {}
    (tmp_path / "pg").mkdir()
    (tmp_path / "server.pid").write_text(f"{os.getpid()}\n")
    (tmp_path / "pg" / "postmaster.pid").write_text(f"{os.getppid()}\n/some/dir\n")
    assert mem0_processes(tmp_path) == {"serve": [os.getpid()], "postgres": [os.getppid()]}
    (tmp_path / "server.pid").write_text("999999999\n")  # no such process
    assert mem0_processes(tmp_path)["serve"] == []
    assert mem0_processes(tmp_path / "missing") == {"serve": [], "postgres": []}


def test_the_commands_options_give_the_phases_the_mixed_load_and_mem0s_folder_if_there(tmp_path):
    opts = {"versus_phases": "bulk,mixed", "mixed_duration": 5.0, "clients": 8}
    chosen = mixed_options({**opts, "mem0_data": tmp_path})
    assert chosen == {
        "phases": ("bulk", "mixed"),
        "mixed_duration": 5.0,
        "mixed_clients": 8,
        "mem0_data": tmp_path,
    }
    assert mixed_options({**opts, "mem0_data": tmp_path / "none"})["mem0_data"] is None
    with pytest.raises(ValueError, match=r"--versus-phases: .*add bulk"):
        mixed_options({**opts, "versus_phases": "mixed", "mem0_data": tmp_path})
    with pytest.raises(ValueError, match="must be positive"):
        mixed_options({**opts, "mixed_duration": 0.0, "mem0_data": tmp_path})
    # Without the mixed load its options do not matter.
    assert mixed_options({**opts, "versus_phases": "write", "clients": 0, "mem0_data": tmp_path})

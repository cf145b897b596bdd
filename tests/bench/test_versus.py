"""`bench --versus-mem0`: the side-by-side with mem0, against a mem0 stand-in on loopback
(tests/support/mem0_standin.py) and MemoryHub's real `serve`, at a tiny size.

What is checked: the requests each side is sent (bodies, ids, filters, key), that the two
systems take turns (request by request, block by block, the first of each pair alternating),
and the report: its shape, its ratios (mem0's time over MemoryHub's) and both systems' evidence
recall on the questions asked. No timing assertions: the figures are the bench's to report.
"""

from __future__ import annotations

import itertools
import json
import socket

import pytest

from bench import locomo
from bench.versus import (
    BLOCK,
    TOP_K,
    WARMUP,
    BenchRequestError,
    Mem0Side,
    Timer,
    _faster,
    order_of,
    round_robin,
)
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

    # What mem0 was sent: every request with its key.
    assert {r["key"] for r in mem0.requests} == {"mem0-admin-key-0123456789"}
    adds, searches = mem0.of("/memories"), mem0.of("/search")
    assert len(mem0.requests) == len(adds) + len(searches)
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
    assert set(phases) == {"bulk", "write", "search_hybrid", "search_semantic"}
    assert phases["bulk"]["order"] == "HMMH"  # two blocks
    for phase in ("write", "search_hybrid", "search_semantic"):
        order = phases[phase]["order"]
        assert len(order) == 2 * requests and _alternates(order), (phase, order)
        # The timed requests begin after WARMUP (odd): mem0 went first in the first of them.
        assert order.startswith("MH")
    # The figures and their ratios: mem0's time over MemoryHub's.
    for phase, row in phases.items():
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

"""The bench machinery at a tiny scale: throwaway database, real server, every measurement.

No timing assertions (performance lives in `bench` itself); this shows the command works end
to end and writes a complete bench-results.json.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from bench import cpu, formation, latency
from bench.latency import percentiles
from bench.locomo import evidence_ids, load, turn_text
from tests.support.bench import run_bench, throwaway_dir
from tests.support.live_server import asgi_server  # noqa: F401 - the fixture
from tests.support.receivers import Receiver

TINY_LOCOMO = [
    {
        "sample_id": "conv-a",
        "conversation": {
            "speaker_a": "Ana",
            "speaker_b": "Ben",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ana", "dia_id": "D1:1", "text": "I adopted a greyhound named Pixel."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Lovely! I started pottery classes."},
                {
                    "speaker": "Ana",
                    "dia_id": "D1:3",
                    "text": "Look at this.",
                    "blip_caption": "a photo of a lighthouse at dusk",
                },
            ],
            "session_2_date_time": "2:00 pm on 9 May, 2023",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "My pottery teacher lives in Porto."},
            ],
        },
        "qa": [
            {
                "question": "What is the name of Ana's greyhound?",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "Where does the pottery teacher live?",
                "evidence": ["D2:1"],
                "category": 4,
            },
            {
                "question": "Which pottery and lighthouse?",
                "evidence": ["D1:2; D1:3"],
                "category": 1,
            },
            {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5},
            {"question": "No evidence?", "evidence": [], "category": 2},
        ],
    }
]


def test_locomo_parsing(tmp_path):
    path = tmp_path / "locomo.json"
    path.write_text(json.dumps(TINY_LOCOMO))
    [conversation] = load(path)
    assert [t.dia_id for t in conversation.turns] == ["D1:1", "D1:2", "D1:3", "D2:1"]
    # A turn's metadata: its session as thread, the session's time a second a turn, the speaker.
    assert conversation.turns[1].metadata == {
        "thread_id": "session-1",
        "occurred_at": "2023-05-08T13:56:01+00:00",
        "mentions": [{"name": "Ben", "type": "person"}],
    }
    assert conversation.turns[3].metadata["occurred_at"] == "2023-05-09T14:00:00+00:00"
    assert (
        conversation.turns[2].text == "Ana: Look at this. [shares a photo of a lighthouse at dusk]"
    )
    assert [q.evidence for q in conversation.questions] == [{"D1:1"}, {"D2:1"}, {"D1:2", "D1:3"}]
    assert evidence_ids(["D8:6; D9:17", " D1:2 "]) == {"D8:6", "D9:17", "D1:2"}
    assert turn_text({"speaker": "A", "text": "hi"}) == "A: hi"


def test_percentiles():
    stats = percentiles([float(i) for i in range(1, 101)])
    assert (stats["n"], stats["p50"], stats["p95"], stats["p99"]) == (100, 51.0, 95.0, 99.0)


def test_on_cpu_deltas():
    before = {1: (1_000_000, 0)}
    after = {1: (3_000_000, 500_000), 2: (1_000_000, 500_000)}  # 2 started in between
    assert cpu.delta_ms(before, after) == (3.0, 1.0)
    if sys.platform == "linux":
        assert cpu.process_ns(os.getpid())[0] > 0
        assert cpu.thread_ns() is not None
    assert cpu.process_ns(2**22 + 12345) is None  # no such process


@pytest.mark.django_db
def test_prewarm_reads_the_hnsw_index_first_and_only_what_fits(tenant, agent, monkeypatch):
    from django.db import connection

    from tests.factories import seed_synthetic

    seed_synthetic(tenant, [agent], 200)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) + 2 FROM pg_index WHERE indrelid = ANY("
            "ARRAY['memories_memory', 'memories_memoryvector']::regclass[])"
        )
        (relations,) = cursor.fetchone()
    said: list[str] = []
    names = latency.prewarm(said.append)
    assert names[:3] == ["memory_vector_hnsw", "memories_memoryvector", "memories_memory"]
    assert len(names) == relations and len(set(names)) == relations
    assert said[-1].startswith("prewarmed ") and f"({relations} of the table" in said[-1]
    # No room in the buffers: nothing is read.
    monkeypatch.setattr(latency, "PREWARM_SHARE", 0.0)
    assert latency.prewarm(said.append) == []


@pytest.mark.slow
def test_bench_command_runs_end_to_end_at_tiny_scale(tmp_path):
    locomo = tmp_path / "locomo.json"
    locomo.write_text(json.dumps(TINY_LOCOMO))
    output = tmp_path / "bench-results.json"
    completed = run_bench(
        "--scale",
        "300",
        "--requests",
        "5",
        "--embedder",
        "hashing",
        "--locomo",
        str(locomo),
        "--prune-scale",
        "0",
        "--ingest-batches",
        "3",
        "--threads",
        "4",
        "--extraction-runs",
        "2",
        "--output",
        str(output),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(output.read_text())
    assert results["meta"]["scales"] == [300]
    # Timed on PostgreSQL as installed: commits flushed, full-page writes (tests run without).
    on = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    assert results["meta"]["postgres"] == on
    assert "(fsync on, synchronous_commit on, full_page_writes on)" in completed.stdout
    latency = results["latency"]["300"]
    assert latency["memories_in_tenant"] == 300
    for op in (
        "store",
        "recall_by_key",
        "list",
        "search_hybrid",
        "search_semantic",
        "search_keyword",
        "hydrate",
    ):
        assert latency[op]["n"] == 5 and latency[op]["p50"] > 0, op
    locomo_result = results["locomo"]
    assert locomo_result["turns"] == 4 and locomo_result["questions"] == 3
    assert locomo_result["embedding_model"] == "hashing-v1"
    for mode in ("keyword", "semantic", "hybrid"):
        recall = locomo_result["modes"][mode]
        assert 0 <= recall["R@1"] <= recall["R@5"] <= recall["R@10"] <= recall["R@20"] <= 100
    # Every question names its evidence in its own words: keyword and hybrid find it all.
    assert locomo_result["modes"]["keyword"]["R@5"] == 100.0
    assert locomo_result["modes"]["hybrid"]["R@5"] == 100.0
    # Stored with their metadata (the headline) and as text only; one conversation: one half.
    runs = locomo_result["runs"]
    assert runs["metadata"]["modes"] == locomo_result["modes"]
    assert runs["plain"]["modes"]["keyword"]["R@5"] == 100.0
    assert set(runs["plain"]["modes"]["hybrid"]["halves"]) == {"0-4"}
    assert "LoCoMo evidence recall" in completed.stdout
    assert "search_hybrid" in completed.stdout
    assert "checkpoint after the load" in completed.stdout and "prewarmed " in completed.stdout
    # Formation: ingest batches over HTTP and extraction runs against the stand-in model.
    ingest = results["formation"]["ingest"]
    assert (ingest["batch_size"], ingest["batches"], ingest["n"]) == (10, 3, 3)
    assert ingest["p50"] > 0 and ingest["messages_per_second"] > 0
    extraction = results["formation"]["extraction"]
    assert (extraction["threads_in_tenant"], extraction["runs"], extraction["warmup_runs"]) == (
        4,
        2,
        2,
    )
    assert extraction["server_ms"]["n"] == 2 and extraction["llm_ms"]["n"] == 2
    assert extraction["memories_added"] == 2 and extraction["embedder"] == "hashing-v1"
    assert set(extraction["phases_ms"]) == {"window", "related", "apply", "summary", "other"}
    assert extraction["phases_ms"]["apply"]["n"] == 2
    # On-CPU time where Linux's schedstat says (None elsewhere).
    assert extraction["cpu_ms"] is None or extraction["cpu_ms"]["n"] == 2
    assert "extraction server_ms @4thr" in completed.stdout
    ingest_line = completed.stdout.split("ingest 10-msg batch", 1)[1].splitlines()[0]
    assert "messages/s, 1 client" in ingest_line, ingest_line
    # The throwaway data directory is gone.
    assert not throwaway_dir(completed.stdout).exists()


def test_the_latency_client_times_requests_and_reports_a_failure_with_its_body(
    asgi_server,  # noqa: F811 - the fixture imported above
):
    from bench.load_client import Client

    client = Client(asgi_server, "mh_not-a-key")
    with pytest.raises(RuntimeError, match=r"bench request failed: 401 .*UNAUTHENTICATED"):
        latency._timed(client, lambda c, i: c.request("GET", "/api/v1/memories"), n=1, warmup=0)
    healthy = latency._timed(client, lambda c, i: c.request("GET", "/healthz"), n=3, warmup=2)
    assert len(healthy) == 3 and min(healthy) > 0  # the warm-up requests are not counted


def test_an_ingest_404_fails_the_bench_instead_of_skipping_the_figure():
    """The bench starts the server it measures, and that server has the ingest route: a 404 is
    a defect of the bench (a wrong URL or key), never a figure to skip. A loopback server of
    our own answers 404 to every POST."""
    receiver = Receiver(script=[404] * 10)
    url = receiver.start().removesuffix("/hook")
    lines: list[str] = []
    try:
        with pytest.raises(RuntimeError, match="ingest bench request failed: 404"):
            formation._ingest(url, "mh_not-a-key", 3, lines.append)
    finally:
        receiver.stop()
    assert [r.answered for r in receiver.received] == [404]  # it stopped at the first
    assert not any("skipped" in line for line in lines)

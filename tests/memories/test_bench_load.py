"""`bench --load`: the mixed load against `serve`, end to end at a tiny size, and its summary.

No timing assertions (the figures are the bench's to report): the command runs, every
operation is answered without error, and the figures land in bench-results.json next to what
the file held.
"""

from __future__ import annotations

import json

import pytest

from memories.bench.load import MIX, summarise
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
        "--output",
        str(output),
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads(output.read_text())
    assert results["latency"] == {"kept": True}  # the other figures stay
    load = results["load"]["hashing"]
    assert (load["clients"], load["duration_s"], load["embedder"]) == (2, 2.0, "hashing")
    on = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}
    assert load["postgres"] == on  # PostgreSQL as installed, not the tests' settings
    for op in ("store", "search_hybrid", "recall", "all"):
        row = load["operations"][op]
        assert row["n"] > 0 and row["p50"] > 0 and row["req_per_s"] > 0, op
        assert row["errors"] == 0, (op, row["error_kinds"])
    assert "mixed load: 2 clients" in completed.stdout
    assert "search_hybrid" in completed.stdout

"""`bench --charts`: a bench-results.json drawn as SVG; the committed charts in docs/ are exactly
what the command draws from docs/bench-results.json."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

DOCS = Path(__file__).resolve().parents[2] / "docs"
RESULTS = {
    "meta": {"started_at": "2026-11-26T10:00:00+00:00"},
    "latency": {
        "10000": {"memories_in_tenant": 10000, "store": {"p50": 6.9, "p95": 10.1, "p99": 12}},
        "100000": {"store": {"p50": 7.8, "p95": 10.3}, "hydrate": {"p50": 6.6, "p95": 8.6}},
    },
    "load": {
        "local": {"operations": {"all": {"req_per_s": 142.4, "p99": 150.0}}},
        "hashing": {"operations": {"all": {"req_per_s": 212.1}}},
        # A paired run (bench --load --pair) has two sides, not one rate: it is not drawn.
        "hashing/pair observability": {"pair": "observability", "sides": {}},
    },
}


def charts(tmp_path: Path, results: dict) -> dict[str, str]:
    source = tmp_path / "bench-results.json"
    source.write_text(json.dumps(results))
    out = StringIO()
    call_command(
        "bench", "--charts", "--output", str(source), "--charts-dir", str(tmp_path), stdout=out
    )
    return {p.name: p.read_text() for p in tmp_path.glob("*.svg")}


def test_charts_are_drawn_from_what_the_results_hold(tmp_path):
    drawn = charts(tmp_path, RESULTS)
    assert set(drawn) == {"bench-latency.svg", "bench-throughput.svg"}  # no LoCoMo figures
    latency = drawn["bench-latency.svg"]
    assert "store · 10k memories: 6.9 ms (to 10.1)" in latency
    assert "hydrate · 100k memories: 6.6 ms (to 8.6)" in latency
    assert "hydrate · 10k" not in latency  # not measured there: no bar
    throughput = drawn["bench-throughput.svg"]
    assert "local · req/s: 142" in throughput and "target 150 req/s (local)" in throughput
    assert "local: p99 150 ms" in throughput and "Run of 2026-11-26." in throughput
    assert "pair" not in throughput


def test_a_file_without_figures_is_refused(tmp_path):
    with pytest.raises(CommandError, match="holds no latency, load or LoCoMo figures"):
        charts(tmp_path, {"meta": {}})
    with pytest.raises(CommandError, match="cannot read"):
        call_command("bench", "--charts", "--output", str(tmp_path / "missing.json"))


def test_the_committed_charts_are_what_the_command_draws(tmp_path):
    drawn = charts(tmp_path, json.loads((DOCS / "bench-results.json").read_text()))
    assert set(drawn) == {"bench-latency.svg", "bench-throughput.svg", "bench-recall.svg"}
    for name, svg in drawn.items():
        assert (DOCS / name).read_text() == svg, f"docs/{name} is stale: run bench --charts"

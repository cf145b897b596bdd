"""`python manage.py bench --charts`: the figures of a `bench-results.json` drawn as SVG files
(docs/benchmarks.md shows them): latency by scale, throughput by embedder, recall by mode.

Only what the file holds is drawn: a bench run with `--skip-locomo` has no recall chart, a
file without `load` no throughput chart. Each chart says which run it comes from (its
`meta.started_at`, and `meta.source` where the figures were transcribed from elsewhere).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memories.charts import Mark, Series, bar_chart

# The operations of the latency bench, in the order they are shown, with short labels.
OPERATIONS = {
    "store": "store",
    "store_in_thread": "store (thread)",
    "recall_by_key": "recall",
    "list": "list",
    "search_hybrid": "hybrid",
    "search_semantic": "semantic",
    "search_keyword": "keyword",
    "hydrate": "hydrate",
}
LOAD_TARGETS = {"local": 150.0, "hashing": 400.0}  # req/s (docs/benchmarks.md)
RECALL_TARGET = 65.0  # LoCoMo evidence recall@10, hybrid, local embedder
VARIANT_LABELS = {"metadata": "with metadata", "plain": "text only"}
MODES = ("keyword", "semantic", "hybrid")
WIDE = 720


def _scale_label(scale: str) -> str:
    n = int(scale)
    return f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1000}k"


def _source(results: dict[str, Any], part: dict[str, Any] | None = None) -> str:
    meta = results.get("meta", {})
    when = (part or {}).get("started_at") or meta.get("started_at") or "an unknown date"
    source = meta.get("source")
    return f"Run of {when[:10]}" + (f" ({source})" if source else "") + "."


def latency_chart(results: dict[str, Any]) -> str | None:
    """p50 bars per operation, one per tenant size, each with its p95 as a whisker."""
    latency = results.get("latency")
    if not latency:
        return None
    scales = sorted(latency, key=int)
    names = [name for name in OPERATIONS if any(name in latency[s] for s in scales)]
    series = [
        Series(
            f"{_scale_label(scale)} memories",
            [latency[scale].get(name, {}).get("p50") for name in names],
            whiskers=[latency[scale].get(name, {}).get("p95") for name in names],
        )
        for scale in scales
    ]
    return bar_chart(
        title="Latency over HTTP by tenant size: p50 bars, p95 whiskers (ms)",
        labels=[OPERATIONS[name] for name in names],
        series=series,
        unit="ms",
        description=_source(results)
        + " Sequential requests, hashing embedder, one agent of 10k memories measured.",
        width=WIDE,
        height=280,
    )


def throughput_chart(results: dict[str, Any]) -> str | None:
    """Requests per second of the mixed load, per embedder, with the target where there is one."""
    # A paired run (`--pair`) has two sides, not one rate: it is not drawn here.
    load = {name: r for name, r in (results.get("load") or {}).items() if "operations" in r}
    if not load:
        return None
    embedders = sorted(load)
    rates = [load[e]["operations"]["all"]["req_per_s"] for e in embedders]
    p99 = [load[e]["operations"]["all"].get("p99") for e in embedders]
    marks = [
        Mark(target, f"target {target:g} req/s ({embedder})")
        for embedder, target in LOAD_TARGETS.items()
        if embedder in load
    ]
    notes = ", ".join(
        f"{e}: p99 {p:g} ms" for e, p in zip(embedders, p99, strict=True) if p is not None
    )
    return bar_chart(
        title="Mixed load throughput by embedder (requests per second)",
        labels=embedders,
        series=[Series("req/s", rates)],
        marks=marks,
        description=_source(results, load[embedders[0]])
        + " 8 clients, 30% store, 40% hybrid search, 30% recall"
        + (f"; {notes}." if notes else "."),
    )


def recall_chart(results: dict[str, Any]) -> str | None:
    """LoCoMo evidence recall@10 by search mode, for turns stored with and without their
    thread, time and speaker; R@20 as the whisker."""
    locomo = results.get("locomo")
    if not locomo or "runs" not in locomo:
        return None
    runs = locomo["runs"]
    series = [
        Series(
            VARIANT_LABELS[variant],
            [runs[variant]["modes"].get(mode, {}).get("R@10") for mode in MODES],
            whiskers=[runs[variant]["modes"].get(mode, {}).get("R@20") for mode in MODES],
        )
        for variant in VARIANT_LABELS
        if variant in runs
    ]
    return bar_chart(
        title="LoCoMo evidence recall by search mode: R@10 bars, R@20 whiskers (%)",
        labels=list(MODES),
        series=series,
        marks=[Mark(RECALL_TARGET, f"target R@10 {RECALL_TARGET:g} (hybrid)")],
        description=_source(results)
        + f" {locomo.get('questions', '?')} questions, embedder {locomo.get('embedding_model')}.",
    )


CHARTS = {
    "bench-latency.svg": latency_chart,
    "bench-throughput.svg": throughput_chart,
    "bench-recall.svg": recall_chart,
}


def write_charts(results: dict[str, Any], directory: Path) -> list[Path]:
    """Write each chart the results can fill into `directory`; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in CHARTS.items():
        svg = draw(results)
        if svg is None:
            continue
        path = directory / name
        path.write_text(svg + "\n")
        written.append(path)
    return written

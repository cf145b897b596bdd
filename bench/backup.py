"""`python -m bench --backup`: what `manage.py backup` costs next to a plain `pg_dump -Fc` of
the same data (docs/benchmarks.md "Backups").

A durable throwaway server is loaded with `scale` synthetic memories (COPY, as the latency
bench loads them), then each is run `repeats` times, alternating: the backup (snapshot, row
counts, dump, sha256, manifest) and `pg_dump -Fc` alone with the same binaries. Medians of the
time and the size.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from accounts.services import agent_get_or_create, tenant_get_or_create
from bench.latency import bulk_load
from memoryhub.backups import create_backup
from memoryhub.backups.tools import (
    client_command,
    connect,
    connection_params,
    find_tools,
    run_client,
    server_major,
)


def _plain_dump(target: Path) -> float:
    with connect() as conn:
        tools = find_tools(server_major(conn))
    conninfo, env = client_command(connection_params())
    started = time.monotonic()
    run_client([tools.pg_dump, "--format=custom", f"--file={target}", f"--dbname={conninfo}"], env)
    return time.monotonic() - started


def run_backup_bench(
    *, scale: int = 100_000, repeats: int = 3, out: Callable[[str], None] = print
) -> dict:
    tenant = tenant_get_or_create(slug="bench-backup")
    agent = agent_get_or_create(tenant=tenant, slug="bench-backup-agent")
    agent.entry_cap = 100_000_000  # caps are not what this measures
    agent.save(update_fields=["entry_cap"])
    job = {"tenant_id": tenant.pk, "agent_id": agent.pk, "agent_index": 0, "count": scale}
    load_seconds = bulk_load([job], out)
    out(f"backup bench: {scale} memories loaded in {load_seconds:.1f}s")
    runs: dict[str, list[tuple[float, int]]] = {"backup": [], "pg_dump": []}
    work = Path(tempfile.mkdtemp(prefix="memoryhub-bench-backup-"))
    try:
        for i in range(repeats):
            result = create_backup(work / f"backup-{i}")
            runs["backup"].append((result.seconds, result.size_bytes))
            plain = work / f"plain-{i}.dump"
            seconds = _plain_dump(plain)
            runs["pg_dump"].append((seconds, plain.stat().st_size))
            out(
                f"run {i + 1}: backup {result.seconds:.2f}s {result.size_bytes / 1e6:.1f} MB; "
                f"pg_dump -Fc {seconds:.2f}s {plain.stat().st_size / 1e6:.1f} MB"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "scale": scale,
        "repeats": repeats,
        **{
            name: {
                "seconds_median": round(statistics.median(s for s, _ in values), 2),
                "mb_median": round(statistics.median(b for _, b in values) / 1e6, 1),
            }
            for name, values in runs.items()
        },
    }


def backup_table(result: dict) -> str:
    rows = [
        f"| {name} | {result[key]['seconds_median']:.2f} s | {result[key]['mb_median']:.1f} MB |"
        for name, key in (("`manage.py backup`", "backup"), ("`pg_dump -Fc` alone", "pg_dump"))
    ]
    return "\n".join(
        [
            f"{result['scale']:,} memories, median of {result['repeats']} runs each",
            "",
            "| | time | size |",
            "|---|---|---|",
            *rows,
        ]
    )

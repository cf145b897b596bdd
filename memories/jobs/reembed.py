"""`reembed`: (re)compute embeddings that are missing or come from another model.

Candidates are memories whose embedding is NULL or whose `embedding_model` is not the current
embedder's `model_name` (`--all`: every one). Active memories, and tombstones that still hold
their text: a tombstone's vector is what a later store compares against to report
`previously_corrected`, so it must live in the same model's space. Purged rows have no text.

Never holds a row lock while embedding: read a batch (no lock), embed it, then write each
batch with one statement: the memories whose version did not move get their `embedding_model`
and their vector row (`MemoryVector`, upserted by the same statement); a memory changed meanwhile
has a new version (and was embedded by its writer), so it is skipped. Batches commit as they go, so a
stopped run resumes where it was: the rows it finished are no longer candidates. Writing a
vector is not a change of the memory: no version bump, no revision. `tenant_id` limits a run to
one tenant (the console's `Run now`).
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime

from django.db import connection, transaction

from memories.embeddings import Embedder, get_embedder
from memories.fingerprints import embedding_text
from memories.jobs.batches import TENANT_SCOPE, Progress, TenantCounts, fetch_all, report
from memories.models import vector_literal
from memories.models.memory import VECTOR_COLUMNS

DEFAULT_REEMBED_BATCH = 64  # texts per embedder call; a local model's sweet spot on a CPU

CANDIDATES = """
    m.purged_at IS NULL
    AND (m.status = 'active' OR (m.status = 'tombstoned' AND m.text <> ''))
"""
# `embedding_model` is "" exactly when a memory has no vector row.
STALE = "m.embedding_model <> %(model)s"

WRITE_BATCH = f"""
WITH v(id, version, embedding) AS (VALUES {{rows}}),
written AS (
    UPDATE memories_memory m SET embedding_model = %s
    FROM v WHERE m.id = v.id AND m.version = v.version
    RETURNING m.id, m.tenant_id, m.agent_id, m.subject_id, m.embedding_model
),
vectors AS (
    INSERT INTO memories_memoryvector ({VECTOR_COLUMNS})
    SELECT w.id, w.tenant_id, w.agent_id, w.subject_id, w.embedding_model, v.embedding::vector
    FROM written w JOIN v ON v.id = w.id
    ON CONFLICT (memory_id) DO UPDATE SET model = EXCLUDED.model, embedding = EXCLUDED.embedding
)
SELECT tenant_id FROM written
"""


def reembed(
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    all_memories: bool = False,
    batch_size: int = DEFAULT_REEMBED_BATCH,
    tenant_id: int | None = None,
    per_tenant: TenantCounts | None = None,
    progress: Progress | None = None,
    embedder: Embedder | None = None,
) -> dict[str, int]:
    """Embed every candidate once; return {"candidates", "embedded", "skipped_changed"}."""
    embedder = embedder or get_embedder()
    where = CANDIDATES if all_memories else f"{CANDIDATES} AND {STALE}"
    where = f"{where} AND {TENANT_SCOPE}"
    params = {"model": embedder.model_name, "scope_tenant_id": tenant_id}
    by_tenant = fetch_all(
        f"SELECT m.tenant_id, count(*) FROM memories_memory m WHERE {where} GROUP BY m.tenant_id",
        params,
    )
    total = sum(n for _, n in by_tenant)
    if per_tenant is not None:
        per_tenant.add("candidates", by_tenant)
    counts = {"candidates": total, "embedded": 0, "skipped_changed": 0}
    if dry_run:
        report(progress, f"reembed (dry run): {total} memories would be embedded")
        return counts
    after = ""
    done = 0
    while True:
        rows = fetch_all(
            f"SELECT m.id, m.version, m.text, m.data, m.tenant_id FROM memories_memory m "
            f"WHERE {where} AND m.id > %(after)s ORDER BY m.id LIMIT %(limit)s",
            dict(params, after=after, limit=batch_size),
        )
        if not rows:
            break
        vectors = embedder.embed([embedding_text(text, data) for _, _, text, data, _ in rows])
        written = _write(rows, vectors, embedder.model_name)
        counts["embedded"] += len(written)
        counts["skipped_changed"] += len(rows) - len(written)
        if per_tenant is not None:
            per_tenant.add("embedded", Counter(written).items())
            per_tenant.add(
                "skipped_changed", (Counter(r[4] for r in rows) - Counter(written)).items()
            )
        done += len(rows)
        after = rows[-1][0]
        report(progress, f"reembed: {_bar(done, total)} {done}/{total}")
    return counts


def _write(rows: list[tuple], vectors: list[list[float]], model_name: str) -> list[int]:
    """Write the vectors of rows whose version did not move; return their tenant ids."""
    values = ", ".join(["(%s, %s::integer, %s)"] * len(rows))
    params: list = []
    for (memory_id, version, _, _, _), vector in zip(rows, vectors, strict=True):
        params += [memory_id, version, vector_literal(vector)]
    params.append(model_name)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(WRITE_BATCH.format(rows=values), params)
        return [row[0] for row in cursor.fetchall()]


def _bar(done: int, total: int, width: int = 30) -> str:
    filled = width * min(done, total) // total if total else width
    return "[" + "#" * filled + "." * (width - filled) + f"] {100 * done // max(total, 1):3d}%"

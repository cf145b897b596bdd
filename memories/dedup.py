"""Near duplicates (SPEC §4 Store): the one rule for "this memory says the same thing".

A candidate duplicates a probe when it has the same normalised text (the same `content_hash`:
similarity 1.0) or when their embeddings, from the same model, have a cosine similarity of at
least the threshold. A store asks it of its new text (against the live memories the agent can
see for `near_duplicates`, against its tombstones for `previously_corrected`); the console asks
it of stored memories (the review queue and a memory's detail page).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import IntegerField, QuerySet, Value
from pgvector.django import CosineDistance

from memories.models import VECTOR_FIELDS, Memory

NEAR_LIMIT = 5  # duplicates reported per probe, unless the caller asks for fewer

Near = tuple[Memory, float]  # a duplicate and its similarity (0–1, 4 decimals)


@dataclass(frozen=True)
class Probe:
    """What a memory is compared by. `memory_id` names a stored memory, never its own duplicate;
    without an `embedding` only the same text counts."""

    content_hash: str
    embedding: Sequence[float] | None
    embedding_model: str
    memory_id: str | None = None


def near_duplicates(
    candidates: QuerySet[Memory],
    probes: Sequence[Probe],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
) -> list[list[Near]]:
    """For each probe, the candidates that duplicate it, best first (the same text first, then
    by similarity; oldest first among equals), at most `limit`.

    Two statements whatever the number of probes (one branch per probe in each), both
    index-friendly: the same-text one uses (tenant, content_hash); the vector one is a plain
    `ORDER BY embedding <=> q LIMIT k` the HNSW index can serve, with iterative scans past
    filtered-out rows. Its threshold is applied afterwards, so a probe with no near duplicate
    never scans further than k neighbours.
    """
    if not probes:
        return []
    with transaction.atomic(savepoint=False):
        # Let HNSW keep scanning past filtered-out rows (pgvector ≥ 0.8) for this transaction.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
        exact = _by_probe(
            len(probes),
            [
                _excluding(candidates.filter(content_hash=probe.content_hash), [probe.memory_id])
                .select_related("agent")
                .defer(*VECTOR_FIELDS)
                .annotate(probe=Value(index, output_field=IntegerField()))
                .order_by("created_at", "id")[:limit]
                for index, probe in enumerate(probes)
            ],
        )
        neighbours = _by_probe(
            len(probes),
            [
                _excluding(
                    candidates.filter(
                        embedding_model=probe.embedding_model, embedding__isnull=False
                    ),
                    [probe.memory_id, *(m.pk for m in exact[index])],
                )
                .select_related("agent")
                .defer(*VECTOR_FIELDS)
                .annotate(
                    probe=Value(index, output_field=IntegerField()),
                    distance=CosineDistance("embedding", probe.embedding),
                )
                .order_by("distance")[:limit]
                for index, probe in enumerate(probes)
                if probe.embedding is not None
            ],
        )
    found = []
    for same, near in zip(exact, neighbours, strict=True):
        pairs = [(memory, 1.0) for memory in same]
        for memory in near:
            similarity = 1.0 - float(memory.distance)
            if similarity >= threshold:
                pairs.append((memory, round(min(max(similarity, 0.0), 1.0), 4)))
        pairs.sort(key=lambda pair: (-pair[1], pair[0].created_at, pair[0].id))
        found.append(pairs[:limit])
    return found


def _excluding(rows: QuerySet[Memory], ids: list[str | None]) -> QuerySet[Memory]:
    ids = [pk for pk in ids if pk is not None]
    return rows.exclude(pk__in=ids) if ids else rows


def _by_probe(count: int, branches: list[QuerySet[Memory]]) -> list[list[Memory]]:
    """Run the branches as one statement (UNION ALL) and sort the rows back to their probe."""
    out: list[list[Memory]] = [[] for _ in range(count)]
    if branches:
        rows = branches[0].union(*branches[1:], all=True) if len(branches) > 1 else branches[0]
        for memory in rows:
            out[memory.probe].append(memory)
    return out

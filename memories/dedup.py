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
from django.db.models import FloatField, IntegerField, QuerySet, Value
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
    by similarity; oldest first among equals), at most `limit`."""
    return near_duplicates_in([(candidates, probes)], threshold=threshold, limit=limit)[0]


def near_duplicates_in(
    searches: Sequence[tuple[QuerySet[Memory], Sequence[Probe]]],
    *,
    threshold: float,
    limit: int = NEAR_LIMIT,
) -> list[list[list[Near]]]:
    """`near_duplicates` of several candidate sets at once (a store asks of its live look-alikes
    and of its tombstones together): for each set, for each of its probes, the duplicates.

    One statement whatever the number of sets and probes (UNION ALL of two branches per probe),
    each branch index-friendly: the same-text one uses (tenant, content_hash); the vector one is
    a plain `ORDER BY embedding <=> q LIMIT k` the HNSW index can serve, with iterative scans
    past filtered-out rows. Its threshold is applied afterwards, so a probe with no near
    duplicate never scans further than k neighbours. The vector branch asks for `2 × limit`:
    the same-text rows (at most `limit` of them) are dropped from it here, and `limit` others
    remain.
    """
    flat = [(candidates, probe) for candidates, probes in searches for probe in probes]
    if not flat:
        return [[] for _ in searches]
    branches: list[QuerySet[Memory]] = []
    for index, (candidates, probe) in enumerate(flat):
        branches.append(
            _excluding(candidates.filter(content_hash=probe.content_hash), probe.memory_id)
            .select_related("agent")
            .defer(*VECTOR_FIELDS)
            .annotate(
                probe=Value(index, output_field=IntegerField()),
                distance=Value(None, output_field=FloatField()),
            )
            .order_by("created_at", "id")[:limit]
        )
        if probe.embedding is not None:
            branches.append(
                _excluding(
                    candidates.filter(
                        embedding_model=probe.embedding_model, embedding__isnull=False
                    ),
                    probe.memory_id,
                )
                .select_related("agent")
                .defer(*VECTOR_FIELDS)
                .annotate(
                    probe=Value(index, output_field=IntegerField()),
                    distance=CosineDistance("embedding", probe.embedding),
                )
                .order_by("distance")[: 2 * limit]
            )
    exact: list[list[Memory]] = [[] for _ in flat]
    near: list[list[Memory]] = [[] for _ in flat]
    with transaction.atomic(savepoint=False):
        # Let HNSW keep scanning past filtered-out rows (pgvector ≥ 0.8) for this transaction.
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL hnsw.iterative_scan = 'relaxed_order'")
        rows = branches[0].union(*branches[1:], all=True) if len(branches) > 1 else branches[0]
        for memory in rows:
            (exact if memory.distance is None else near)[memory.probe].append(memory)
    found = []
    for same, neighbours in zip(exact, near, strict=True):
        pairs = [(memory, 1.0) for memory in same]
        seen = {memory.pk for memory in same}
        others = [memory for memory in neighbours if memory.pk not in seen]
        others.sort(key=lambda memory: memory.distance)
        for memory in others[:limit]:
            similarity = 1.0 - float(memory.distance)
            if similarity >= threshold:
                pairs.append((memory, round(min(max(similarity, 0.0), 1.0), 4)))
        pairs.sort(key=lambda pair: (-pair[1], pair[0].created_at, pair[0].id))
        found.append(pairs[:limit])
    out: list[list[list[Near]]] = []
    position = 0
    for _, probes in searches:
        out.append(found[position : position + len(probes)])
        position += len(probes)
    return out


def _excluding(rows: QuerySet[Memory], pk: str | None) -> QuerySet[Memory]:
    """A stored memory is never its own duplicate."""
    return rows.exclude(pk=pk) if pk is not None else rows

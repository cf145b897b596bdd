"""reembed: missing or foreign-model embeddings are recomputed, without locks held while embedding."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from memories.embeddings import HashingEmbedder
from memories.fingerprints import embedding_text
from memories.jobs.reembed import reembed
from memories.models import JobRun, Memory, MemoryRevision, MemoryVector
from memoryhub.errors import EmbeddingError
from tests.support.commands import last_json_line
from tests.support.jobs import add_memories

pytestmark = pytest.mark.django_db

HASHING = HashingEmbedder()


def vector_of(memory) -> list[float]:
    memory.refresh_from_db()
    return [round(float(x), 5) for x in MemoryVector.objects.get(memory=memory).embedding]


def expected(text: str) -> list[float]:
    return [round(x, 5) for x in HASHING.embed([text])[0]]


def set_embedding(memory, model: str) -> None:
    memory.embedding_model = model
    memory.embedding = HASHING.embed(["something else entirely"])[0]
    memory.save(update_fields=["embedding_model"])  # and the vector row


def test_missing_and_foreign_embeddings_are_recomputed(tenant, agent):
    missing, foreign, current = add_memories(tenant, agent, 3, text="coffee order")
    set_embedding(foreign, "old-model")
    set_embedding(current, "hashing-v1")

    counts = reembed()

    assert counts == {"candidates": 2, "embedded": 2, "skipped_changed": 0}
    for memory in (missing, foreign):
        assert vector_of(memory) == expected(memory.text)
        assert memory.embedding_model == "hashing-v1"
        assert memory.version == 1  # a vector is not a change of the memory
    assert vector_of(current) == expected("something else entirely")  # left alone
    assert not MemoryRevision.objects.exists()
    assert reembed()["candidates"] == 0  # idempotent


def test_all_recomputes_every_memory(tenant, agent):
    (current,) = add_memories(tenant, agent, text="tea")
    set_embedding(current, "hashing-v1")

    out = StringIO()
    call_command("reembed", "--all", "--batch", "10", stdout=out)

    assert last_json_line(out.getvalue()) == {"candidates": 1, "embedded": 1, "skipped_changed": 0}
    assert "1/1" in out.getvalue()
    assert vector_of(current) == expected("tea 0")
    run = JobRun.objects.get(job="reembed")
    assert (run.trigger, run.status) == ("command", "ok")


def test_tombstones_with_text_are_included_and_purged_rows_skipped(tenant, agent):
    tombstone, purged, evicted = add_memories(tenant, agent, 3)
    Memory.objects.filter(pk=tombstone.pk).update(status="tombstoned")
    Memory.objects.filter(pk=purged.pk).update(
        status="tombstoned", text="", purged_at=tombstone.created_at
    )
    Memory.objects.filter(pk=evicted.pk).update(status="evicted")

    assert reembed()["embedded"] == 1
    assert vector_of(tombstone) == expected(tombstone.text)
    purged.refresh_from_db()
    evicted.refresh_from_db()
    assert purged.embedding is None and evicted.embedding is None


def test_a_memory_changed_while_embedding_is_skipped(tenant, agent):
    first, second = add_memories(tenant, agent, 2, text="plan")

    class Racing(HashingEmbedder):
        """An agent rewrites `second` while its batch is being embedded (no lock is held)."""

        def embed(self, texts):
            Memory.objects.filter(pk=second.pk).update(text="plan rewritten", version=2)
            return super().embed(texts)

    counts = reembed(embedder=Racing())

    assert counts == {"candidates": 2, "embedded": 1, "skipped_changed": 1}
    assert vector_of(first) == expected("plan 0")
    second.refresh_from_db()
    assert second.embedding is None  # its writer embeds it; the next reembed would otherwise


def test_a_failing_embedder_keeps_finished_batches_and_the_next_run_resumes(tenant, agent):
    memories = add_memories(tenant, agent, 5)

    class FailsOnSecondBatch(HashingEmbedder):
        calls = 0

        def embed(self, texts):
            type(self).calls += 1
            if type(self).calls == 2:
                raise EmbeddingError()
            return super().embed(texts)

    with pytest.raises(EmbeddingError):
        reembed(embedder=FailsOnSecondBatch(), batch_size=2)
    assert Memory.objects.filter(vector__isnull=False).count() == 2

    assert reembed(batch_size=2) == {"candidates": 3, "embedded": 3, "skipped_changed": 0}
    assert all(vector_of(m) == expected(m.text) for m in memories)


def test_a_memory_without_text_is_embedded_from_its_data_as_stores_do(tenant, agent):
    (memory,) = add_memories(tenant, agent, text="")
    Memory.objects.filter(pk=memory.pk).update(text="", data={"plan": "pro", "seats": 3})

    reembed()

    assert vector_of(memory) == expected(embedding_text("", {"plan": "pro", "seats": 3}))

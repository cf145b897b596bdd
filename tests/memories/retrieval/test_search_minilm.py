"""Search quality with the real model (docs/operations.md#embedders): the packaged all-MiniLM-L6-v2,
on ONNX Runtime as `make install` exports it (memories/onnx_minilm.py), finds a paraphrase that
shares no word with the query, by semantic and by hybrid search, through the REST API; so does its
8-bit copy (`MEMORYHUB_EMBEDDER_PRECISION=int8`), whose memories record it as their model.

The rest of the suite embeds with the hashing embedder, for which "semantic" means shared
words; these few memories are the check that the vectors carry meaning.
"""

from __future__ import annotations

import pytest

from memories import onnx_minilm
from memories.embeddings import LocalEmbedder, reset_embedder
from memories.jobs.reembed import reembed
from memories.models import Memory

pytestmark = pytest.mark.skipif(
    not (LocalEmbedder.available() and onnx_minilm.available()),
    reason="the local model is not installed or not exported to ONNX (make install does both)",
)

MEMORIES = {
    "flying": "Is terrified when flying and avoids airplanes.",
    "dog": "Their dog died last week; the family is grieving.",
    "car": "Drives a blue 2019 Subaru Outback.",
    "nurse": "Works night shifts as a nurse at the county hospital.",
    "birthday": "Birthday is on the 14th of July.",
    "coffee": "Prefers oat milk in coffee, never sugar.",
    "train": "Loves to travel by train across Europe.",
}
# Each query names one memory without any of its words, and what keyword search finds for it:
# "travel" is the train memory's word, the model finds the memory meant.
PARAPHRASES = [
    ("fear of air travel", "flying", ["train"]),
    ("pet passed away recently", "dog", []),
    ("what car do they own", "car", []),
]


MODELS = {"fp32": "all-MiniLM-L6-v2", "int8": "all-MiniLM-L6-v2-int8"}


def use_minilm(settings, precision: str) -> None:
    """The process-wide embedder becomes the packaged model on ONNX, in this precision."""
    if not onnx_minilm.available(precision):
        pytest.skip(f"no {precision} model (make install exports and quantizes it)")
    settings.MEMORYHUB_EMBEDDER = "local"
    settings.MEMORYHUB_EMBEDDER_BACKEND = "onnx"
    settings.MEMORYHUB_EMBEDDER_PRECISION = precision
    settings.MEMORYHUB_EMBEDDER_IDLE_THREADS = 0  # one session to load, not two
    reset_embedder()


@pytest.fixture(params=sorted(MODELS))
def minilm(settings, request):
    """The packaged model for one test, in each precision (the name its memories record)."""
    use_minilm(settings, request.param)
    yield MODELS[request.param]
    reset_embedder()


def words(text: str) -> set[str]:
    return {w.strip(".,;?").lower() for w in text.split()}


@pytest.mark.django_db
def test_a_paraphrase_without_a_shared_word_is_found_by_semantic_and_hybrid_search(
    api_client, minilm
):
    names = {}
    for name, text in MEMORIES.items():
        response = api_client.post(
            "/api/v1/memories", {"text": text, "dedup_policy": "insert"}, format="json"
        )
        assert response.status_code == 201, response.json()
        names[response.json()["memory_id"]] = name
    models = set(Memory.objects.values_list("embedding_model", flat=True))
    assert models == {minilm}

    def found(query: str, mode: str) -> list[str]:
        body = {"query": query, "mode": mode, "limit": len(MEMORIES)}
        response = api_client.post("/api/v1/search", body, format="json")
        assert response.status_code == 200, response.json()
        return [names[hit["id"]] for hit in response.json()["memories"]]

    for query, meant, by_words in PARAPHRASES:
        assert not words(query) & words(MEMORIES[meant]), query
        assert found(query, "keyword") == by_words, query  # words alone miss it
        assert found(query, "semantic")[0] == meant, query
        # Hybrid fuses both: only a memory holding the query's words may rank above it.
        hybrid = found(query, "hybrid")
        assert meant in hybrid and set(hybrid[: hybrid.index(meant)]) <= set(by_words), query


@pytest.mark.django_db
def test_switching_precision_is_switching_models_and_reembed_moves_the_memories(
    api_client, settings
):
    """Memories embedded at full precision are another model's to the 8-bit embedder: the
    semantic search skips them until `reembed` has given them its vectors."""
    if not onnx_minilm.available("int8"):
        pytest.skip("no int8 model (make install quantizes it)")
    use_minilm(settings, "fp32")
    try:
        for text in MEMORIES.values():
            body = {"text": text, "dedup_policy": "insert"}
            assert api_client.post("/api/v1/memories", body, format="json").status_code == 201
        use_minilm(settings, "int8")
        query = {"query": "pet passed away recently", "mode": "semantic", "limit": 3}
        assert api_client.post("/api/v1/search", query, format="json").json()["memories"] == []

        counts = reembed()
        assert counts["embedded"] == len(MEMORIES)
        models = set(Memory.objects.values_list("embedding_model", flat=True))
        assert models == {"all-MiniLM-L6-v2-int8"}
        hits = api_client.post("/api/v1/search", query, format="json").json()["memories"]
        assert hits[0]["data"]["text"] == MEMORIES["dog"]
    finally:
        reset_embedder()

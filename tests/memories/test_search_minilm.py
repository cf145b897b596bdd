"""Search quality with the real model (SPEC §9): the packaged all-MiniLM-L6-v2, on ONNX Runtime
as `make install` exports it (memories/onnx_minilm.py), finds a paraphrase that shares no word
with the query, by semantic and by hybrid search, through the REST API.

The rest of the suite embeds with the hashing embedder, for which "semantic" means shared
words; these few memories are the check that the vectors carry meaning.
"""

from __future__ import annotations

import pytest

from memories import onnx_minilm
from memories.embeddings import LocalEmbedder, reset_embedder
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


@pytest.fixture
def minilm(settings):
    """The process-wide embedder is the packaged model on ONNX for one test."""
    settings.MEMORYHUB_EMBEDDER = "local"
    settings.MEMORYHUB_EMBEDDER_BACKEND = "onnx"
    settings.MEMORYHUB_EMBEDDER_IDLE_THREADS = 0  # one session to load, not two
    reset_embedder()
    yield
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
    assert models == {"all-MiniLM-L6-v2"}

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

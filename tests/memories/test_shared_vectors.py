"""The query-vector cache a node's processes share (docs/operations.md#embedders): a query one
process embedded costs another no model pass; a slot being rewritten, damaged, or holding
another text or model's vector is a miss, never a wrong vector; 0 slots turn it off."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memories import onnx_minilm, shared_vectors
from memories.embeddings import HashingEmbedder, LocalEmbedder
from memories.shared_vectors import HEADER_SIZE, SharedVectorCache, default_path

ROOT = Path(__file__).resolve().parents[2]
DIM = 384
HASHING = HashingEmbedder()


def vector(text: str) -> list[float]:
    """A float32-exact vector of `text` (what the cache holds is float32)."""
    return np.asarray(HASHING.embed_one(text), dtype=np.float32).tolist()


class CountedEmbedder(LocalEmbedder):
    """The local embedder with the model replaced by hashing vectors: what these tests count is
    its passes, not what the model computes."""

    def _load_backend(self):
        self.runtime = "stand-in"
        return lambda texts: np.array([vector(text) for text in texts], dtype=np.float32)


def counted(path: Path, *, slots: int = 64, precision: str = "fp32") -> CountedEmbedder:
    return CountedEmbedder(
        precision=precision, cache_size=16, shared_cache_size=slots, shared_cache_path=str(path)
    )


def slot_offset(cache: SharedVectorCache, model: str, text: str) -> int:
    return cache._offset(shared_vectors.text_key(model, text))


# --- Two real processes, the real model ---------------------------------------------------------


def embed_in_a_process(path: Path, precision: str, text: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-m", "tests.support.shared_vectors", str(path), precision, text],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.strip().splitlines()[-1])


QUERY = "what does Caroline do on weekends?"


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """One process embeds a query with the 8-bit model; then another, of the same node, asks for
    it; then one running the full-precision model asks for it."""
    if not (LocalEmbedder.available() and onnx_minilm.available("int8")):
        pytest.skip("the local model is not installed, exported and quantized (make install)")
    path = tmp_path_factory.mktemp("shared") / "vectors.bin"
    first = embed_in_a_process(path, "int8", QUERY)
    second = embed_in_a_process(path, "int8", QUERY)
    other_model = embed_in_a_process(path, "fp32", QUERY)
    return first, second, other_model


@pytest.mark.slow
def test_a_query_one_process_embedded_costs_another_no_model_pass(processes):
    first, second, _ = processes
    assert (first["passes"], first["loaded"], first["hits"]) == (1, True, 0)
    assert (second["passes"], second["loaded"], second["hits"]) == (0, False, 1)
    assert second["vector"] == first["vector"]  # the model's float32 vector, bit for bit
    assert first["model"] == second["model"] == "all-MiniLM-L6-v2-int8"


@pytest.mark.slow
def test_another_model_never_gets_the_8_bit_vector(processes):
    first, _, other_model = processes
    assert other_model["model"] == "all-MiniLM-L6-v2"
    assert (other_model["passes"], other_model["hits"]) == (1, 0)
    similarity = float(np.dot(first["vector"], other_model["vector"]))
    assert 0.95 < similarity < 0.9999  # close, and not the same vector


def test_readers_never_get_a_wrong_vector_while_another_process_rewrites_the_slot(tmp_path):
    """One slot, two texts: a writer process overwrites it with one then the other, thousands of
    times, while this process reads both; every hit is its own text's vector."""
    path = tmp_path / "vectors.bin"
    cache = SharedVectorCache.open(path, slots=1, dim=DIM)
    assert cache is not None
    texts = ["first text", "second text"]
    # Vectors that float32 holds exactly, one the other's negation (no model in the writer).
    expected = {
        text: [sign * i / 1024 for i in range(DIM)]
        for text, sign in zip(texts, (1, -1), strict=True)
    }
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from memories.shared_vectors import SharedVectorCache\n"
            "cache = SharedVectorCache.open(sys.argv[1], slots=1, dim=384)\n"
            "vs = [[sign * i / 1024 for i in range(384)] for sign in (1, -1)]\n"
            "for i in range(20000):\n"
            "    cache.put('m', sys.argv[2 + i % 2], vs[i % 2])\n",
            str(path),
            *texts,
        ],
        cwd=ROOT,
    )
    hits = reads = 0
    try:
        while writer.poll() is None:
            for text in texts:
                got = cache.get("m", text)
                reads += 1
                if got is not None:
                    hits += 1
                    assert got == expected[text]
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == 0
    assert hits > 0 and reads > hits  # the slot changed hands under the reader


# --- One process: the file and its slots ---------------------------------------------------------


def test_a_second_embedder_on_the_file_gets_the_vector_without_a_pass(tmp_path):
    path = tmp_path / "vectors.bin"
    one, two = counted(path), counted(path)
    assert one.embed(["hello there"]) == [vector("hello there")]
    assert two.embed(["hello there"]) == [vector("hello there")]
    assert (one._batcher.passes, two._batcher.passes) == (1, 0)
    assert two._encode_fn is None  # not even loaded
    assert path.stat().st_mode & 0o777 == 0o600
    # A batch's texts are not single queries: neither looked up nor kept.
    two.embed(["a", "b"])
    assert two._batcher.passes == 1
    assert one.shared_cache().get(two.model_name, "a") is None


def test_0_slots_turn_the_shared_cache_off(tmp_path):
    path = tmp_path / "vectors.bin"
    one, two = counted(path, slots=0), counted(path, slots=0)
    one.embed(["hello there"])
    two.embed(["hello there"])
    assert (one._batcher.passes, two._batcher.passes) == (1, 1)
    assert one.shared_cache() is None
    assert not path.exists()


def test_another_model_or_text_is_a_miss(tmp_path):
    cache = SharedVectorCache.open(tmp_path / "vectors.bin", slots=64, dim=DIM)
    cache.put("all-MiniLM-L6-v2", "hello", vector("hello"))
    assert cache.get("all-MiniLM-L6-v2", "hello") == vector("hello")
    assert cache.get("all-MiniLM-L6-v2-int8", "hello") is None
    assert cache.get("all-MiniLM-L6-v2", "hello ") is None
    fp32, int8 = counted(tmp_path / "shared.bin"), counted(tmp_path / "shared.bin")
    int8.model_name = "all-MiniLM-L6-v2-int8"
    fp32.embed(["hello"])
    int8.embed(["hello"])
    assert (fp32._batcher.passes, int8._batcher.passes) == (1, 1)


def test_a_damaged_or_torn_slot_is_a_miss(tmp_path):
    path = tmp_path / "vectors.bin"
    cache = SharedVectorCache.open(path, slots=1, dim=DIM)
    cache.put("m", "hello", vector("hello"))
    offset = slot_offset(cache, "m", "hello")
    with path.open("r+b") as handle:  # one bit of the vector flipped
        handle.seek(offset + 100)
        byte = handle.read(1)
        handle.seek(offset + 100)
        handle.write(bytes([byte[0] ^ 1]))
    assert cache.get("m", "hello") is None
    # Torn: the slot's head (check and key) from one write, its vector from another.
    cache.put("m", "hello", vector("hello"))
    head = bytes(cache._map[offset : offset + 32])
    cache.put("m", "other", vector("other"))
    cache._map[offset : offset + 32] = head
    assert cache.get("m", "hello") is None
    assert cache.get("m", "other") is None
    # And a slot of zeros (never written) is a miss, not a zero vector.
    cache._map[offset : offset + cache.slot_size] = bytes(cache.slot_size)
    assert cache.get("m", "") is None


def test_a_new_text_takes_over_its_slot(tmp_path):
    cache = SharedVectorCache.open(tmp_path / "vectors.bin", slots=1, dim=DIM)
    cache.put("m", "one", vector("one"))
    cache.put("m", "two", vector("two"))
    assert cache.get("m", "one") is None
    assert cache.get("m", "two") == vector("two")
    assert (cache.hits, cache.misses) == (1, 1)


def test_the_first_process_sizes_the_file_and_later_ones_take_its_size(tmp_path):
    path = tmp_path / "vectors.bin"
    first = SharedVectorCache.open(path, slots=8, dim=DIM)
    later = SharedVectorCache.open(path, slots=4096, dim=DIM)
    assert first.slots == later.slots == 8
    assert path.stat().st_size == HEADER_SIZE + 8 * (32 + 4 * DIM)
    first.put("m", "hello", vector("hello"))
    assert later.get("m", "hello") == vector("hello")


def test_a_file_it_cannot_trust_leaves_the_cache_off(tmp_path, caplog):
    open_to_others = tmp_path / "open.bin"
    open_to_others.touch(mode=0o666)
    open_to_others.chmod(0o666)
    other_dim = tmp_path / "dim.bin"
    SharedVectorCache.open(other_dim, slots=4, dim=8)
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"not a cache" * 10)
    foreign.chmod(0o600)
    link = tmp_path / "link.bin"
    link.symlink_to(tmp_path / "elsewhere.bin")
    with caplog.at_level(logging.WARNING, logger="memories.shared_vectors"):
        for path in (open_to_others, other_dim, foreign, link):
            assert SharedVectorCache.open(path, slots=4, dim=DIM) is None
    assert caplog.text.count("the shared query-vector cache at") == 4
    assert not (tmp_path / "elsewhere.bin").exists()
    # The embedder then runs its passes as without the cache.
    embedder = counted(foreign)
    embedder.embed(["hello"])
    assert embedder.shared_cache() is None and embedder._batcher.passes == 1


def test_the_default_file_is_in_memory_and_named_after_the_database_and_model():
    database = {"HOST": "/srv/memoryhub/var/run", "PORT": 5432, "NAME": "memoryhub"}
    path = default_path(database, "all-MiniLM-L6-v2-int8")
    if Path("/dev/shm").is_dir():
        assert path.parent == Path("/dev/shm")
    assert path.name.startswith("memoryhub-vectors-v1-")
    assert default_path(database, "all-MiniLM-L6-v2-int8") == path
    assert default_path(database, "all-MiniLM-L6-v2") != path
    assert default_path({**database, "NAME": "other"}, "all-MiniLM-L6-v2-int8") != path

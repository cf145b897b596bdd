"""The local embedder's runtimes (docs/operations.md#embedders): the ONNX export gives torch's
vectors, batching and the query cache change no vector, and `auto` takes ONNX only where it was
exported."""

from __future__ import annotations

import gc
import logging
import threading

import numpy as np
import pytest

# Imported at collection: its django.setup() reconfigures logging, which inside a test takes
# caplog's handler away (run alone, the load-failure test saw no log).
import memoryhub.asgi  # noqa: F401
from memories import onnx_minilm
from memories.embeddings import LocalEmbedder, get_embedder, reset_embedder
from memoryhub.errors import EmbeddingError
from tests.factories import asgi_lifespan

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not LocalEmbedder.available(),
        reason="local-embeddings extra not installed",
    ),
]

TEXTS = [
    "The cat sits on the mat.",
    "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
    "",
    "naïve café — résumé, 東京で会いましょう",
    "a very long memory " * 200,  # past the model's 256 tokens: truncated the same way
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    return onnx_minilm.export(tmp_path_factory.mktemp("onnx") / "minilm.onnx")


@pytest.fixture
def onnx_env(exported, monkeypatch):
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(exported))
    return exported


@pytest.fixture(scope="module")
def quantized(exported):
    """The 8-bit copy, where `model_path("int8")` looks for it: beside the exported model."""
    return onnx_minilm.quantize(exported, exported.with_name("minilm-int8.onnx"))


def cosines(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_onnx_vectors_match_the_torch_ones(onnx_env):
    onnx = LocalEmbedder(backend="onnx", cache_size=0)
    torch = LocalEmbedder(backend="torch", cache_size=0)
    a, b = onnx.embed(TEXTS), torch.embed(TEXTS)
    assert (onnx.runtime, torch.runtime) == ("onnx", "torch")
    assert onnx.model_name == torch.model_name == "all-MiniLM-L6-v2"
    assert cosines(a, b).min() > 0.999
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)
    # One at a time (no padding) gives the vectors of the batch.
    alone = [onnx.embed([text])[0] for text in TEXTS]
    assert cosines(alone, a).min() > 0.9999


def test_concurrent_calls_each_get_their_own_vector_and_queries_are_cached(onnx_env):
    embedder = LocalEmbedder(backend="onnx", cache_size=16)
    expected = LocalEmbedder(backend="onnx", cache_size=0).embed(TEXTS)
    got: dict[int, list[float]] = {}
    barrier = threading.Barrier(len(TEXTS))

    def call(index: int) -> None:
        barrier.wait()
        got[index] = embedder.embed([TEXTS[index]])[0]

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(TEXTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert cosines([got[i] for i in range(len(TEXTS))], expected).min() > 0.9999
    passes = embedder._batcher.passes
    assert passes <= len(TEXTS)
    again = embedder.embed([TEXTS[1]])[0]
    assert embedder._batcher.passes == passes  # from the cache, no forward pass
    assert again == got[1]


def test_auto_takes_torch_with_a_warning_where_nothing_was_exported(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(tmp_path / "missing.onnx"))
    embedder = LocalEmbedder(backend="auto")
    with caplog.at_level(logging.WARNING, logger="memories.embeddings"):
        assert len(embedder.embed(["hello"])[0]) == 384
    assert embedder.runtime == "torch"
    assert "no exported ONNX model" in caplog.text


def test_auto_takes_onnx_where_exported(onnx_env):
    embedder = LocalEmbedder(backend="auto")
    embedder.embed(["hello"])
    assert embedder.runtime == "onnx"


def test_an_unknown_or_missing_backend_is_an_embedding_error(tmp_path, monkeypatch):
    with pytest.raises(EmbeddingError):
        LocalEmbedder(backend="tpu").embed(["hello"])
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(tmp_path / "missing.onnx"))
    with pytest.raises(EmbeddingError):
        LocalEmbedder(backend="onnx").embed(["hello"])


def test_a_pass_on_an_idle_machine_takes_the_idle_session_with_the_same_vectors(onnx_env):
    running = {"now": 1}
    model = onnx_minilm.OnnxMiniLM(
        threads=1, idle_threads=2, cores=2, runnable=lambda: running["now"]
    )
    idle = model.encode(TEXTS)
    assert model.idle_passes == 1
    running["now"] = 2  # the caller and the thread that handed it the request
    model.encode(TEXTS[:1])
    assert model.idle_passes == 2
    running["now"] = 3  # a third thread wants a core: the one-thread session
    busy = model.encode(TEXTS)
    assert model.idle_passes == 2
    running["now"] = None  # unreadable: never the idle session
    model.encode(TEXTS[:1])
    assert model.idle_passes == 2
    # The thread count changes no vector, not even in its last bits.
    assert np.array_equal(idle, busy)


def test_no_idle_session_where_it_would_not_have_more_threads_or_free_cores(onnx_env):
    assert onnx_minilm.OnnxMiniLM(threads=2, idle_threads=2, cores=4).idle_session is None
    assert onnx_minilm.OnnxMiniLM(threads=1, idle_threads=2, cores=1).idle_session is None
    wide = onnx_minilm.OnnxMiniLM(threads=1, idle_threads=2, cores=4, runnable=lambda: 4)
    wide.encode(TEXTS[:1])  # the caller, its server thread and 2 others: room for both threads
    assert wide.idle_passes == 1
    wide.runnable = lambda: 5
    wide.encode(TEXTS[:1])
    assert wide.idle_passes == 1
    embedder = LocalEmbedder(backend="onnx", idle_threads=1)
    embedder.embed(["hello"])
    assert embedder.onnx_model.idle_session is None


def test_runnable_threads_reads_the_kernel_count(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.84 1.46 1.74 3/87 5522\n")
    assert onnx_minilm.runnable_threads(str(loadavg)) == 3
    loadavg.write_text("garbage\n")
    assert onnx_minilm.runnable_threads(str(loadavg)) is None
    assert onnx_minilm.runnable_threads(str(tmp_path / "missing")) is None


def test_length_groups_pad_each_pass_to_its_own_longest_text_at_the_least_work():
    import itertools
    import random

    groups = onnx_minilm.length_groups
    assert groups([10, 15, 20, 60]) == [[0, 1, 2], [3]]  # 140 tokens of work against 250
    assert groups([17, 17, 17, 17]) == [[0, 1, 2, 3]]  # one length: one pass
    assert groups([9]) == [[0]]

    def work(lengths, parts):
        cost = onnx_minilm.PASS_COST_TOKENS
        return sum(cost + len(rows) * max(lengths[r] for r in rows) for rows in parts)

    rng = random.Random(5)
    for _ in range(200):
        lengths = [rng.choice([3, 8, 12, 17, 30, 64, 128, 256]) for _ in range(rng.randint(1, 7))]
        got = groups(lengths)
        assert sorted(r for rows in got for r in rows) == list(range(len(lengths)))
        order = sorted(range(len(lengths)), key=lambda r: lengths[r])
        least = min(  # every split of the texts sorted by length into contiguous passes
            work(lengths, [order[a:b] for a, b in itertools.pairwise([0, *cuts, len(order)])])
            for k in range(len(order))
            for cuts in itertools.combinations(range(1, len(order)), k)
        )
        assert work(lengths, got) == least


def test_texts_of_mixed_lengths_get_the_vectors_they_get_alone(onnx_env):
    model = onnx_minilm.OnnxMiniLM(threads=1)
    texts = ["short", "a much longer text " * 30, "mid length text about the cat", "x"]
    shapes = []
    session = model.session

    class Recording:
        def run(self, names, feed):
            shapes.append(feed["input_ids"].shape)
            return session.run(names, feed)

    model.session = Recording()
    together = model.encode(texts)
    # The long text runs apart; the three short ones are padded to the longest of them only.
    assert sorted(shapes) == [(1, 122), (3, 8)]
    alone = np.vstack([model.encode([text]) for text in texts])
    assert cosines(together, alone).min() > 0.99999


@pytest.fixture
def served_local(onnx_env, settings):
    """The process-wide embedder is the local model (on the test export) for one test."""
    settings.MEMORYHUB_EMBEDDER = "local"
    settings.MEMORYHUB_EMBEDDER_BACKEND = "onnx"
    settings.MEMORYHUB_GC_FREEZE = True
    reset_embedder()
    yield
    gc.unfreeze()
    reset_embedder()


def test_a_web_process_loads_the_model_and_freezes_its_start_up_before_serving(served_local):
    from django.urls import clear_url_caches, get_resolver

    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    clear_url_caches()  # a fresh process's resolver: its URLconf not read yet
    assert "url_patterns" not in vars(get_resolver())
    sent = asgi_lifespan()
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert "url_patterns" in vars(get_resolver())  # the views imported before any request
    embedder = get_embedder()
    assert embedder.onnx_model is not None  # loaded, and run once: its first query is cached
    assert embedder.cache.get(embedder.model_name) is not None
    assert gc.get_freeze_count() > 10_000


def test_a_model_that_cannot_load_does_not_stop_the_web_process(served_local, monkeypatch, caplog):
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", "/nonexistent/minilm.onnx")
    with caplog.at_level(logging.WARNING):
        sent = asgi_lifespan()
    assert sent == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert "could not load the local embedding model" in caplog.text  # with its cause
    assert "the embedder is not ready (The local embedding model could not be loaded)" in (
        caplog.text
    )
    with pytest.raises(EmbeddingError):  # each request reports it, as before
        get_embedder().embed(["hello"])


def test_without_gc_freeze_nothing_is_frozen(served_local, settings):
    settings.MEMORYHUB_GC_FREEZE = False
    gc.unfreeze()
    asgi_lifespan()
    assert get_embedder().onnx_model is not None
    assert gc.get_freeze_count() == 0


def test_the_int8_copy_is_close_to_the_model_and_recorded_as_another(onnx_env, quantized):
    assert onnx_minilm.model_path("int8") == quantized
    assert quantized.stat().st_size < onnx_env.stat().st_size / 3  # 8-bit weights, not 32
    exact = LocalEmbedder(backend="onnx", cache_size=0)
    int8 = LocalEmbedder(backend="auto", precision="int8", cache_size=0)
    a, b = exact.embed(TEXTS), int8.embed(TEXTS)
    assert int8.runtime == "onnx"
    assert (exact.model_name, int8.model_name) == ("all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8")
    similarity = cosines(a, b)
    # Close to the model's own vectors, and not them: they are the 8-bit model's.
    assert similarity.min() > 0.97  # the empty text 0.979, the others 0.987-0.994
    assert similarity.max() < 0.9999
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
    # Each text in a pass of its own: alone or among others, one vector (an 8-bit pass
    # quantizes its activations with one scale for all its texts).
    assert [int8.embed([text])[0] for text in TEXTS] == b


def test_int8_runs_on_onnx_only_and_needs_its_file(onnx_env, quantized, tmp_path, monkeypatch):
    # On torch it would give the model's own vectors under the 8-bit model's name.
    with pytest.raises(EmbeddingError):
        LocalEmbedder(backend="torch", precision="int8").embed(["hello"])
    with pytest.raises(ValueError, match="unknown precision"):
        LocalEmbedder(precision="fp16")
    lone = tmp_path / "lone.onnx"
    lone.write_bytes(onnx_env.read_bytes())  # the model, without its 8-bit copy beside it
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(lone))
    assert onnx_minilm.available() and not onnx_minilm.available("int8")
    with pytest.raises(EmbeddingError):
        LocalEmbedder(backend="auto", precision="int8").embed(["hello"])


def test_quantize_command_needs_the_exported_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(tmp_path / "missing.onnx"))
    assert onnx_minilm.main(["onnx_minilm", "quantize"]) == 1
    assert "run `python -m memories.onnx_minilm export` first" in capsys.readouterr().err
    assert onnx_minilm.main(["onnx_minilm", "shrink"]) == 2
    assert not (tmp_path / "missing-int8.onnx").exists()

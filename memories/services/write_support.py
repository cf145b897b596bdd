"""What every write service uses: the embedding, advisory locks, reasons (secret-scanned)."""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection

from memories import validation
from memories.embeddings import get_embedder
from memories.models import EMBEDDING_DIM
from memories.secrets_scan import scan_secrets
from memoryhub.errors import EmbeddingError, InvalidInput

logger = logging.getLogger(__name__)

# Optimistic retries of an unconditioned write that lost a race: every round has a winner, so
# n concurrent writers of one row need at most n rounds; this only bounds a runaway.
MAX_RETRIES = 100
MAX_REASON_CHARS = 1000


def embed_text(value: str) -> tuple[list[float], str]:
    """One embedding and the model name; any backend failure becomes EMBEDDING_ERROR."""
    return embed_texts([value])[0]


def embed_texts(values: list[str]) -> list[tuple[list[float], str]]:
    """Embeddings of several texts in one backend call (one forward pass), with the model."""
    try:
        embedder = get_embedder()
        vectors = [list(vector) for vector in embedder.embed(values)]
    except EmbeddingError:
        raise
    except Exception as exc:  # noqa: BLE001 - a backend may fail in any way; never half-write
        logger.warning("embedding backend failed: %s", type(exc).__name__)
        raise EmbeddingError() from exc
    if len(vectors) != len(values) or any(len(v) != EMBEDDING_DIM for v in vectors):
        raise EmbeddingError(details={"reason": "wrong dimension"})
    return [(vector, embedder.model_name) for vector in vectors]


def advisory_lock(name: str) -> None:
    """A transaction-level advisory lock on `name` (released at commit or rollback)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


def clean_reason(value: Any) -> str:
    """A tombstone's reason as given by an agent or operator (optional, bounded, no NUL, no
    secret)."""
    if value is None:
        return ""
    if not isinstance(value, str) or len(value) > MAX_REASON_CHARS:
        raise InvalidInput(
            f"'reason' must be a string of at most {MAX_REASON_CHARS} characters", field="reason"
        )
    validation.reject_nul(value, "reason")
    scan_secrets({"reason": value})
    return value.strip()

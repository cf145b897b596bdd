"""The per-key rate limit, one counter for every door an agent comes in by: REST and MCP.

`MEMORYHUB_RATE_LIMIT_PER_MINUTE` requests per API key (0: off) → 429 RATE_LIMITED with
Retry-After. A key's minute opens with its first request and every node counts in it, so the
limit holds however many nodes and web processes serve the key (docs/operations.md#rate-limits):

- by default in PostgreSQL, the database all nodes share: one upsert per limited request on
  `memories_ratelimitcounter` (one row per key, windows timed by the database's clock, so the
  nodes' clocks need not agree). `purge_retention` deletes the rows of keys idle for a day.
- with `MEMORYHUB_CACHE_URL` (a Redis server) in Redis instead, through Django's RedisCache: one
  round trip (SET NX EX, INCR, TTL in one MULTI), the key's expiry closing its window. While Redis
  cannot be reached, requests are let through (and a warning logged): a guard against runaway
  agents must not take the API down with it.

Both count atomically: N concurrent requests of one key, on any nodes, let exactly the limit in.
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import caches
from django.db import connection
from redis.exceptions import RedisError
from rest_framework.throttling import BaseThrottle

logger = logging.getLogger(__name__)

WINDOW_SECONDS = 60

# The key's row: a new window (hits 1) when it has none or its window is over, else one more
# hit. The old row's values are read in SET, the new one's in RETURNING; statement_timestamp()
# is the same all through one statement, inside a transaction or not.
COUNT_SQL = """
INSERT INTO memories_ratelimitcounter AS c (bucket, window_start, hits)
VALUES (%(bucket)s, statement_timestamp(), 1)
ON CONFLICT (bucket) DO UPDATE SET
    hits = CASE WHEN c.window_start > statement_timestamp() - make_interval(secs => %(window)s) THEN c.hits + 1 ELSE 1 END,
    window_start = CASE WHEN c.window_start > statement_timestamp() - make_interval(secs => %(window)s)
        THEN c.window_start ELSE statement_timestamp() END
RETURNING c.hits, extract(epoch FROM c.window_start + make_interval(secs => %(window)s) - statement_timestamp())
"""
# The rows of keys that made no request for this long (`purge_retention`).
STALE_SQL = (
    "DELETE FROM memories_ratelimitcounter "
    "WHERE window_start < statement_timestamp() - make_interval(secs => %s)"
)
STALE_AFTER = 24 * 3600

# At most one warning a minute per process about an unreachable cache.
_last_warning = [0.0]


def count_in_database(bucket: str) -> tuple[int, float]:
    """(hits in the bucket's current window, this one included; seconds until it closes)."""
    with connection.cursor() as cursor:
        cursor.execute(COUNT_SQL, {"bucket": bucket, "window": WINDOW_SECONDS})
        hits, remaining = cursor.fetchone()
    return hits, float(remaining)


def count_in_cache(bucket: str) -> tuple[int, float]:
    """The same, in the Redis cache of MEMORYHUB_CACHE_URL (Django's RedisCache, whose client
    gives the pipeline: its public API has no atomic "create with expiry, then add")."""
    cache = caches["default"]
    key = cache.make_and_validate_key(f"ratelimit:{bucket}")
    client = cache._cache.get_client(key, write=True)  # type: ignore[attr-defined]
    pipe = client.pipeline(transaction=True)
    pipe.set(key, 0, ex=WINDOW_SECONDS, nx=True)
    pipe.incr(key)
    pipe.ttl(key)
    _, hits, ttl = pipe.execute()
    return int(hits), float(ttl if ttl > 0 else WINDOW_SECONDS)


def delete_stale_counters() -> int:
    """Delete the counters of keys idle for a day (their windows closed long ago)."""
    with connection.cursor() as cursor:
        cursor.execute(STALE_SQL, [STALE_AFTER])
        return cursor.rowcount


class KeyRateThrottle(BaseThrottle):
    """DRF's throttle interface over the shared counter (REST's views; MCP calls it too)."""

    def __init__(self) -> None:
        self.remaining = 0.0

    def allow_request(self, request, view) -> bool:
        limit = settings.MEMORYHUB_RATE_LIMIT_PER_MINUTE
        if not limit:
            return True
        principal = request.user
        key = principal.api_key
        bucket = f"key:{key.pk}" if key else f"agent:{principal.agent.pk}"
        if not settings.MEMORYHUB_CACHE_URL:
            hits, self.remaining = count_in_database(bucket)
            return hits <= limit
        try:
            hits, self.remaining = count_in_cache(bucket)
        except (RedisError, OSError):  # the cache server is away: let the request in
            now = time.monotonic()
            if now - _last_warning[0] >= WINDOW_SECONDS:
                _last_warning[0] = now
                logger.warning("rate limit not counted: the cache server failed", exc_info=True)
            return True
        return hits <= limit

    def wait(self) -> float:
        return max(1, math.ceil(self.remaining))

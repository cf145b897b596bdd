"""API key format: `mh_` + 32 random base62 characters + a 6-character base62 checksum.

The checksum lets a malformed or mistyped key be rejected before any database query; the key
itself is stored only as a SHA-256 hash beside a lookup prefix (`mh_` + the first 8 random
characters). Keys carry ~190 bits of randomness, so a fast hash is the right tool here.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
KEY_PREFIX = "mh_"
RANDOM_LEN = 32
CHECKSUM_LEN = 6
LOOKUP_LEN = len(KEY_PREFIX) + 8
KEY_RE = re.compile(rf"^{KEY_PREFIX}[0-9A-Za-z]{{{RANDOM_LEN + CHECKSUM_LEN}}}$")


def _base62(number: int, width: int) -> str:
    chars = []
    for _ in range(width):
        number, rem = divmod(number, 62)
        chars.append(ALPHABET[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), CHECKSUM_LEN)


def generate_key() -> str:
    body = "".join(secrets.choice(ALPHABET) for _ in range(RANDOM_LEN))
    return f"{KEY_PREFIX}{body}{_checksum(body)}"


def is_well_formed(key: str) -> bool:
    """Shape and checksum only: no database involved."""
    if not isinstance(key, str) or not KEY_RE.fullmatch(key):
        return False
    body, check = key[len(KEY_PREFIX) : -CHECKSUM_LEN], key[-CHECKSUM_LEN:]
    return hmac.compare_digest(_checksum(body), check)


def lookup_prefix(key: str) -> str:
    return key[:LOOKUP_LEN]


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("ascii")).hexdigest()


def matches(key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(key), stored_hash)

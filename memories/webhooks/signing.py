"""Webhook secrets and signatures.

A secret is `whsec_` + 43 random base64url characters (256 bits), shown once when the endpoint
is created. The signature needs it in clear, so it is kept encrypted (AES-256-GCM, key derived
from SECRET_KEY: rotating SECRET_KEY means creating the endpoints again). Each delivery carries

    MemoryHub-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

so a receiver can check the body and refuse replays older than a few minutes
(docs/operations.md has a receiver that does).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings

PREFIX = "whsec_"
_VERSION = "v1:"


def new_secret() -> str:
    return PREFIX + secrets.token_urlsafe(32)


def _key() -> bytes:
    return hmac.new(
        settings.SECRET_KEY.encode(), b"memoryhub webhook secrets v1", hashlib.sha256
    ).digest()


def key_fingerprint() -> str:
    """A public fingerprint of the key the secrets are encrypted with: equal fingerprints,
    the same key (a backup's manifest records it, so a restore can tell a wrong SECRET_KEY
    before it touches anything). One-way: it tells nothing about the key."""
    return hmac.new(_key(), b"memoryhub key fingerprint v1", hashlib.sha256).hexdigest()[:32]


def encrypt(secret: str) -> str:
    nonce = os.urandom(12)
    sealed = AESGCM(_key()).encrypt(nonce, secret.encode(), None)
    return _VERSION + base64.b64encode(nonce + sealed).decode()


class SecretUnreadable(Exception):
    """The stored secret cannot be decrypted (SECRET_KEY changed since it was made)."""


def decrypt(stored: str) -> str:
    if not stored.startswith(_VERSION):
        raise SecretUnreadable("unknown secret format")
    raw = base64.b64decode(stored[len(_VERSION) :])
    try:
        return AESGCM(_key()).decrypt(raw[:12], raw[12:], None).decode()
    except InvalidTag:
        raise SecretUnreadable("the secret cannot be decrypted (SECRET_KEY changed?)") from None


def signature(secret: str, body: bytes, timestamp: int) -> str:
    """The `MemoryHub-Signature` header's value for `body` sent at `timestamp`."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, tolerance: int = 300, now=None) -> bool:
    """What a receiver checks: the signature matches and is at most `tolerance` seconds old."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature(secret, body, timestamp).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))

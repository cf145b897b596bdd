"""Small typed helpers to read settings from the environment."""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from django.core.exceptions import ImproperlyConfigured


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() in {"1", "true", "yes", "on"}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw else default


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: Collection[str]) -> str:
    """One of `choices`; any other value stops the process at startup rather than at first use."""
    value = os.environ.get(name, "").strip() or default
    if value not in choices:
        allowed = ", ".join(sorted(choices))
        raise ImproperlyConfigured(f"{name} must be one of {allowed} (got {value!r})")
    return value


CACHE_SCHEMES = ("redis://", "rediss://", "unix://")


def cache_settings(url: str) -> dict[str, dict]:
    """Django's CACHES: its per-process memory cache, or with `url` (MEMORYHUB_CACHE_URL) the
    Redis server there through Django's own RedisCache, whose commands time out after a second
    (a hung Redis must not hold requests). Any other scheme stops the process at startup."""
    if not url:
        return {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    if not url.startswith(CACHE_SCHEMES):
        raise ImproperlyConfigured(
            f"MEMORYHUB_CACHE_URL must start with {', '.join(CACHE_SCHEMES)} (got {url!r})"
        )
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "memoryhub",
            "OPTIONS": {"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
        }
    }


@contextmanager
def environment_defaults(**defaults: str) -> Iterator[None]:
    """Variables that are unset read as these inside the block, and are unset again after it
    (so a process started later does not inherit them)."""
    added = [name for name in defaults if name not in os.environ]
    os.environ.update({name: defaults[name] for name in added})
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)

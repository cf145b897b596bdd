"""The installed MemoryHub's version, as backups' manifests and tenant files record it."""

from __future__ import annotations

from importlib import metadata


def app_version() -> str:
    try:
        return metadata.version("memoryhub")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"

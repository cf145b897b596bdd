"""The bench's HTTP client, and its progress bar (the product's, `memoryhub.progress`). The
throwaway database and the web server it runs on are the product's own (`memoryhub.throwaway`:
`manage.py screenshots` uses them too)."""

from __future__ import annotations

import httpx

from memoryhub.progress import Progress

__all__ = ["Progress", "api_client"]


def api_client(base_url: str, key: str):
    """A keep-alive HTTP client with the agent's key."""
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60.0)

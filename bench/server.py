"""The bench's HTTP client and its progress bar. The throwaway database and the web server it
runs on are the product's own (`memoryhub.throwaway`: `manage.py screenshots` uses them too)."""

from __future__ import annotations

import sys
import time

import httpx


def api_client(base_url: str, key: str):
    """A keep-alive HTTP client with the agent's key."""
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60.0)


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, total: int, stream=None):
        self.label, self.total, self.done = label, max(total, 1), 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self._last_decile = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.tty:
            filled = int(30 * self.done / self.total)
            bar = "#" * filled + "." * (30 - filled)
            self.stream.write(f"\r{self.label} [{bar}] {self.done}/{self.total}")
            self.stream.flush()
        else:
            decile = 10 * self.done // self.total
            if decile != self._last_decile:
                self._last_decile = decile
                self.stream.write(f"{self.label}: {self.done}/{self.total}\n")
                self.stream.flush()

    def close(self) -> None:
        seconds = time.monotonic() - self.started
        end = "\n" if self.tty else ""
        self.stream.write(f"{end}{self.label}: {self.done}/{self.total} in {seconds:.1f}s\n")
        self.stream.flush()

"""A one-line progress bar on stderr: the bench's, and the tenant export and import commands'."""

from __future__ import annotations

import sys
import time


class Progress:
    """A one-line progress bar on stderr (plain lines when stderr is not a terminal)."""

    def __init__(self, label: str, total: int, stream=None):
        self.label, self.total, self.done = label, max(total, 1), 0
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.started = time.monotonic()
        self._last_decile = -1
        self._last_shown = -1

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.tty:
            shown = 1000 * self.done // self.total  # redrawn when a tenth of a percent moves
            if shown == self._last_shown:
                return
            self._last_shown = shown
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

"""The one clock of the memory rules. Services take `now=` so jobs (`--now`) and tests can pin it."""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone


def resolve_now(now: datetime | None = None) -> datetime:
    return now if now is not None else timezone.now()

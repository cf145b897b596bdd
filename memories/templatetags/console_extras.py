"""Small template filters of the console: relative times and the one empty-value dash."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from memoryhub.durations import format_duration

register = template.Library()

EMPTY = mark_safe('<span class="none" title="none">—</span>')  # noqa: S308 - a constant


@register.filter
def ago(value: datetime | None) -> str:
    """ "just now" under a minute (never "0 minutes ago"), else "3 hours ago"."""
    if value is None:
        return "never"
    if timezone.now() - value < timedelta(minutes=1):
        return "just now"
    return f"{timesince(value)} ago"


@register.filter(needs_autoescape=True)
def or_dash(value, autoescape: bool = True) -> SafeString:
    """The value, or the console's one dash for "nothing here" (same glyph, font and colour
    everywhere, also in monospaced cells)."""
    if value is None or value == "" or value == [] or value == {}:
        return EMPTY
    return mark_safe(conditional_escape(value) if autoescape else str(value))  # noqa: S308


@register.filter
def duration_text(value: timedelta | None) -> str:
    """A duration as the console writes and reads them: `24h`, `30d` ('' for none)."""
    return format_duration(value) if value is not None else ""

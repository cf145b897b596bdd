"""Small template filters of the console: relative times, the one empty-value dash, and
identifiers in words (`memories.console.labels`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import conditional_escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince

from memories.console import labels
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


register.filter("job_label", labels.job_label)
register.filter("job_description", labels.job_description)
register.filter("trigger_label", labels.trigger_label)
register.filter("count_label", labels.count_label)


@register.filter
def counts_text(counts: dict | None, skip_zeros: bool = False) -> str:
    """A run's counters in words: "3 expired, 1 evicted over a cap"."""
    return labels.counts_text(counts or {}, skip_zeros=bool(skip_zeros))


@register.filter
def schedule_text(schedule) -> str:
    """A django-q2 schedule in words: "every 10 minutes", "hourly", "cron 0 3 * * *"."""
    if schedule.schedule_type == "I":
        minutes = schedule.minutes or 1
        return "every minute" if minutes == 1 else f"every {minutes} minutes"
    if schedule.schedule_type == "C":
        return f"cron {schedule.cron}"
    return schedule.get_schedule_type_display().lower()


@register.filter
def duration_text(value: timedelta | None) -> str:
    """A duration as the console writes and reads them: `24h`, `30d` ('' for none)."""
    return format_duration(value) if value is not None else ""

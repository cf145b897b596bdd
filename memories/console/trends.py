"""The dashboard's charts: the last 30 UTC days of a tenant, drawn as SVG (`memories.charts`).

Each figure is one aggregate query by day, over rows the tenant's indexes lead to, so the cost
follows what happened in the window, not the size of the tenant:

- live memories by category: today's live counts (the dashboard's own table, no query here)
  walked back day by day with the memories created in the window and those that left it
  (tombstoned, evicted, expired: `memory_inactive_idx`; or past their expiry, not yet pruned);
- writes: every change writes one revision (`revision_recent_idx`, index only); reads:
  `DailyReads`, counted by `memories.access`;
- pending reviews by the day they arrived and why (`memory_review_idx`);
- extraction runs by outcome, and the tokens they spent (`extractionrun_recent_idx`).

A memory that changed category counts under its category of today.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import TypedDict

from django.db.models import Case, Count, F, Q, Sum, When
from django.db.models.functions import TruncDate
from django.utils.safestring import SafeString, mark_safe

from accounts.models import Tenant
from memories.charts import Series, bar_chart, line_chart
from memories.clock import resolve_now
from memories.models import (
    DASHBOARD_DAYS,
    DailyReads,
    ExtractionRun,
    Memory,
    MemoryRevision,
    ReviewReason,
    ReviewState,
    RunState,
    Status,
)

DAYS = DASHBOARD_DAYS
# Categories drawn apart (the largest); the rest share one "other" band.
CATEGORIES_SHOWN = 5
# A chart's drawing size: a dashboard card is ~480-650 px wide, so the text stays legible.


class _Size(TypedDict):
    width: int
    height: int


SIZE: _Size = {"width": 560, "height": 230}
RUN_OUTCOMES = {
    RunState.DONE: "done",
    RunState.FAILED: "failed",
    RunState.DEFERRED: "deferred (budget)",
    "open": "queued or running",
}


@dataclass(frozen=True)
class Chart:
    """One dashboard chart: its heading, the SVG, a one-line summary, and whether it has
    anything to show (else the page shows `hint`: what would fill it)."""

    title: str
    svg: SafeString
    summary: str
    empty: bool
    hint: str = ""


def _window(now: datetime) -> list[date]:
    today = now.astimezone(UTC).date()
    return [today - timedelta(days=DAYS - 1 - i) for i in range(DAYS)]


def _start(days: list[date]) -> datetime:
    return datetime.combine(days[0], time.min, tzinfo=UTC)


def _labels(days: list[date]) -> list[str]:
    return [f"{d:%b} {d.day}" for d in days]


def _by_day(rows, days: list[date], key: str = "n") -> list[int]:
    found = {row["day"]: row[key] or 0 for row in rows}
    return [found.get(d, 0) for d in days]


def live_by_category(
    *, tenant: Tenant, days: list[date], now: datetime, live_now: dict[str, int]
) -> dict[str, list[int]]:
    """Live memories of each category at the end of each day (today: now)."""
    start = _start(days)
    memories = Memory.objects.for_tenant(tenant)
    created = (
        memories.filter(created_at__gte=start)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "category")
        .annotate(n=Count("id"))
        .order_by()
    )
    # When each memory stopped being live: its status change, or its expiry while still active
    # (invisible at once, marked `expired` by the next prune).
    left_at = Case(When(status=Status.ACTIVE, then=F("expires_at")), default=F("status_changed_at"))
    departed = (
        memories.filter(
            Q(status__in=[Status.TOMBSTONED, Status.EVICTED, Status.EXPIRED])
            & Q(status_changed_at__gte=start)
            | Q(status=Status.ACTIVE, expires_at__gte=start, expires_at__lte=now)
        )
        .annotate(day=TruncDate(left_at, tzinfo=UTC))
        .values("day", "category")
        .annotate(n=Count("id"))
        .order_by()
    )
    change: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    for row in created:
        change[row["category"]][row["day"]] += row["n"]
    for row in departed:
        change[row["category"]][row["day"]] -= row["n"]
    out: dict[str, list[int]] = {}
    for category in set(live_now) | set(change):
        count, series = live_now.get(category, 0), []
        for day in reversed(days):
            series.append(count)
            count -= change[category].get(day, 0)
        out[category] = list(reversed(series))
    return out


def writes_per_day(*, tenant: Tenant, days: list[date]) -> list[int]:
    rows = (
        MemoryRevision.objects.for_tenant(tenant)
        .filter(created_at__gte=_start(days))
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day")
        .annotate(n=Count("id"))
        .order_by()
    )
    return _by_day(rows, days)


def reads_per_day(*, tenant: Tenant, days: list[date]) -> list[int]:
    rows = (
        DailyReads.objects.for_tenant(tenant).filter(day__gte=days[0]).values("day", n=F("reads"))
    )
    return _by_day(rows, days)


def pending_by_arrival(
    *, tenant: Tenant, days: list[date], now: datetime
) -> tuple[dict[str, list[int]], int]:
    """Live pending memories by the day they were stored and their `ReviewReason`, and how
    many older ones wait."""
    rows = (
        Memory.objects.for_tenant(tenant)
        .live(now)
        .filter(review_state=ReviewState.PENDING)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "review_reason")
        .annotate(n=Count("id"))
        .order_by()
    )
    by_reason: dict[str, dict[date, int]] = defaultdict(dict)
    older = 0
    for row in rows:
        if row["day"] < days[0]:
            older += row["n"]
        else:
            by_reason[row["review_reason"]][row["day"]] = row["n"]
    return {r: [found.get(d, 0) for d in days] for r, found in by_reason.items()}, older


def runs_per_day(*, tenant: Tenant, days: list[date]) -> tuple[dict[str, list[int]], list[int]]:
    """Extraction runs started each day by outcome, and the tokens they spent."""
    rows = (
        ExtractionRun.objects.for_tenant(tenant)
        .filter(created_at__gte=_start(days))
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "state")
        # `tokens` names a property of the model, not a field: the stubs' plugin mistakes it.
        .annotate(  # type: ignore[no-redef]
            n=Count("id"), tokens=Sum(F("prompt_tokens") + F("completion_tokens"))
        )
        .order_by()
    )
    runs: dict[str, dict[date, int]] = defaultdict(lambda: defaultdict(int))
    tokens: dict[date, int] = defaultdict(int)
    for row in rows:
        state = row["state"] if row["state"] in RUN_OUTCOMES else "open"
        runs[state][row["day"]] += row["n"]
        tokens[row["day"]] += row["tokens"] or 0
    by_state = {s: [runs[s].get(d, 0) for d in days] for s in RUN_OUTCOMES if s in runs}
    return by_state, [tokens.get(d, 0) for d in days]


def _category_bands(series: dict[str, list[int]]) -> list[Series]:
    ranked = sorted(series, key=lambda c: (-max(series[c], default=0), c))
    bands = [Series(c, series[c]) for c in ranked[:CATEGORIES_SHOWN]]
    rest = ranked[CATEGORIES_SHOWN:]
    if rest:
        bands.append(
            Series("other", [sum(v) for v in zip(*(series[c] for c in rest), strict=True)])
        )
    return bands


def dashboard_charts(
    *, tenant: Tenant, live_now: dict[str, int], now: datetime | None = None
) -> list[Chart]:
    """The four charts of the dashboard (six queries), each with a summary line."""
    now = resolve_now(now)
    days = _window(now)
    labels = _labels(days)
    charts = []

    categories = live_by_category(tenant=tenant, days=days, now=now, live_now=live_now)
    total = sum(live_now.values())
    first = sum(s[0] for s in categories.values())
    charts.append(
        Chart(
            "Live memories by category",
            mark_safe(  # noqa: S308 - built by memories.charts, every text escaped there
                bar_chart(
                    title="Live memories by category, last 30 days",
                    labels=labels,
                    series=_category_bands(categories),
                    stacked=True,
                    whole=True,
                    **SIZE,
                )
            ),
            f"{total} live now, {total - first:+d} in 30 days.",
            empty=not any(any(s) for s in categories.values()),
            hint="Nothing stored in the last 30 days. Agents store memories with "
            "POST /api/v1/memories or the MCP tool memory_store.",
        )
    )

    writes, reads = (
        writes_per_day(tenant=tenant, days=days),
        reads_per_day(tenant=tenant, days=days),
    )
    charts.append(
        Chart(
            "Writes and reads per day",
            mark_safe(  # noqa: S308 - as above
                line_chart(
                    title="Writes and reads per day, last 30 days",
                    labels=labels,
                    series=[Series("writes", writes), Series("reads", reads)],
                    whole=True,
                    **SIZE,
                )
            ),
            f"Today: {writes[-1]} writes (every change), {reads[-1]} reads "
            "(gets, recalls, searches, hydrates).",
            empty=not any(writes) and not any(reads),
            hint="No writes or reads in the last 30 days.",
        )
    )

    pending, older = pending_by_arrival(tenant=tenant, days=days, now=now)
    reasons = dict(ReviewReason.choices)
    waiting = sum(sum(v) for v in pending.values()) + older
    charts.append(
        Chart(
            "Pending reviews",
            mark_safe(  # noqa: S308 - as above
                bar_chart(
                    title="Pending reviews by the day they arrived, and why",
                    labels=labels,
                    series=[
                        Series(reasons.get(reason, "Other"), values)
                        for reason, values in sorted(pending.items())
                    ],
                    stacked=True,
                    whole=True,
                    **SIZE,
                )
            ),
            f"{waiting} waiting"
            + (f", {older} of them stored more than 30 days ago." if older else "."),
            empty=waiting == 0,
            hint="Nothing waits for review. Inferred memories, and those stored next to a "
            "near-duplicate, come here.",
        )
    )

    runs, tokens = runs_per_day(tenant=tenant, days=days)
    charts.append(
        Chart(
            "Extraction runs and tokens",
            mark_safe(  # noqa: S308 - as above
                bar_chart(
                    title="Extraction runs per day by outcome, last 30 days",
                    labels=labels,
                    series=[Series(RUN_OUTCOMES[s], v) for s, v in runs.items()],
                    stacked=True,
                    whole=True,
                    width=SIZE["width"],
                    height=190,
                )
                + line_chart(
                    title="LLM tokens spent on extraction per day, last 30 days",
                    labels=labels,
                    series=[Series("tokens", tokens)],
                    whole=True,
                    width=SIZE["width"],
                    height=160,
                )
            ),
            f"{sum(sum(v) for v in runs.values())} runs, {sum(tokens)} tokens in 30 days.",
            empty=not runs,
            hint="No extraction runs in the last 30 days. Agents hand over conversations with "
            "POST /api/v1/threads/{thread_id}/messages; an LLM (MEMORYHUB_LLM_URL) forms "
            "memories from them.",
        )
    )
    return charts

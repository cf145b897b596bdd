"""Context-aware ranking: what a hybrid ranking adds to a candidate's own score.

A memory of a thread is part of a sequence (owner, subject, `thread_id`, ordered by
`occurred_at`, else `created_at`; links kept by the triggers of memories/sql/memory_sequences.sql). On top of the
hybrid score `b` of `memories.retrieval.ranking`:

- its full-text document holds its neighbours' words at weight D (own key and text at A): a
  neighbour-only word adds `NEIGHBOUR_IDF` of its IDF and `NEIGHBOUR_TS_WEIGHT` to ts_rank;
- `+ NEIGHBOUR_WEIGHT × b` of its better neighbour (the memory before or after it) and
  `+ SEQUENCE_WEIGHT × b` of the best other candidate of its sequence, both among the
  candidates (a neighbour outside both lists scores too little to be worth reading);
- `+ DATE_DAY_WEIGHT` when its `occurred_at` falls on a day the query names ("on 8 May 2023",
  "2023-05-08"), `+ DATE_MONTH_WEIGHT` in a month it names ("in July 2023", "in June");
- `× MENTION_BOOST` when a name in its `mentions` is named by the query (all its words).

Memories without a thread, time or mentions get none of these: they rank as before. The
weights were fitted on LoCoMo conversations 0–4 and reported on 5–9 (docs/benchmarks.md,
"Search quality"); no rule knows the dataset: dates and names come from the query and the memories.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NEIGHBOUR_IDF = 0.5
NEIGHBOUR_TS_WEIGHT = 0.05
NEIGHBOUR_WEIGHT = 0.3
SEQUENCE_WEIGHT = 0.2
DATE_DAY_WEIGHT = 0.15
DATE_MONTH_WEIGHT = 0.05
MENTION_BOOST = 1.2

MONTHS = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
# Most specific first; a span matched once is not matched again by a vaguer pattern.
_PATTERNS = (
    re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<month>[01]\d)-(?P<day>[0-3]\d)\b"),
    re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY},?\s+{_YEAR}\b", re.IGNORECASE),
    re.compile(rf"\b{_DAY}(?:\s+of)?\s+{_MONTH}\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?!\s*(?:,\s*)?\d)", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
    # A month name alone: capitalised, and not "May"/"March" (a verb as often as a month).
    re.compile(
        r"\b(?P<month>January|February|April|June|July|August|September|October|November|"
        r"December)\b"
    ),
)


@dataclass
class QueryDates:
    """Dates a query names: each (year or None, month, day or None)."""

    years: list[int | None] = field(default_factory=list)
    months: list[int] = field(default_factory=list)
    days: list[int | None] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.months)

    def arrays(self) -> tuple[str, str, str]:
        """Years, months and days as PostgreSQL `int[]` literals (`{2023,NULL}`)."""
        return tuple(  # type: ignore[return-value]
            "{" + ",".join("NULL" if v is None else str(int(v)) for v in values) + "}"
            for values in (self.years, self.months, self.days)
        )


def _month(value: str) -> int:
    return int(value) if value.isdigit() else MONTHS[value.lower().rstrip(".")]


def query_dates(query: str) -> QueryDates:
    """The calendar days and months `query` names (at most 8), in any common spelling."""
    found = QueryDates()
    taken: list[tuple[int, int]] = []
    for pattern in _PATTERNS:
        for match in pattern.finditer(query):
            start, end = match.span()
            if any(start < b and a < end for a, b in taken):
                continue
            groups = match.groupdict()
            month = _month(groups["month"])
            day = int(groups["day"]) if groups.get("day") else None
            if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
                continue
            taken.append((start, end))
            found.years.append(int(groups["year"]) if groups.get("year") else None)
            found.months.append(month)
            found.days.append(day)
            if len(found.months) == 8:
                return found
    return found

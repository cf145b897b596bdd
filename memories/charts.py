"""Small charts drawn as SVG on the server: the console dashboard's trends and `bench --charts`.

No JavaScript and no charting library: a chart is a string of SVG markup built from plain
numbers, placed in a page as it is (the Content-Security-Policy allows no inline script, and
none is needed) or written to a file. Colours are presentation attributes, never a `style`
attribute, so the same markup renders inside the console (where CSP forbids inline styles) and
as a standalone `.svg` file. Every bar and point carries a `<title>` (its value on hover and for
screen readers), and the chart a `<title>`/`<desc>`: a chart is also readable as text.

Output is deterministic (same numbers, same bytes), so generated files diff cleanly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

# Okabe–Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000")
INK, MUTED, GRID = "#1d2330", "#687285", "#e3e6eb"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif"

WIDTH, HEIGHT = 640, 240
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 34, 30


@dataclass(frozen=True)
class Series:
    """One named row of values, one per label (None: no value there)."""

    name: str
    values: Sequence[float | None]
    # Bar charts: a second value per label drawn as a tick above the bar (e.g. p95 over p50).
    whiskers: Sequence[float | None] | None = None


@dataclass(frozen=True)
class Mark:
    """A horizontal reference line (a target, a limit) with its label."""

    value: float
    label: str


@dataclass
class _Frame:
    labels: Sequence[str]
    top: float
    unit: str
    width: int = WIDTH
    height: int = HEIGHT
    parts: list[str] = field(default_factory=list)

    @property
    def plot_width(self) -> float:
        return self.width - MARGIN_LEFT - MARGIN_RIGHT

    @property
    def plot_height(self) -> float:
        return self.height - MARGIN_TOP - MARGIN_BOTTOM

    def y(self, value: float) -> float:
        return MARGIN_TOP + self.plot_height * (1 - min(value, self.top) / self.top)

    def slot(self, index: int) -> tuple[float, float]:
        """The x of label `index`'s slot and the slot's width."""
        width = self.plot_width / max(len(self.labels), 1)
        return MARGIN_LEFT + index * width, width


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above `value` (a grid step that reads well);
    at least 0.25 (a chart of nothing still has an axis)."""
    if value <= 0.25:
        return 0.25
    exponent = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        top = step * 10**exponent
        if top >= value * (1 - 1e-9):
            return float(top)
    return float(10 ** (exponent + 1))


def number(value: float) -> str:
    """A value as a short label: 1200 → 1.2k, 3500000 → 3.5M, 62.4 → 62.4, 0.25 → 0.25."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.1f}".rstrip("0").rstrip(".") + suffix
    if magnitude >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.{1 if magnitude >= 10 else 2}f}".rstrip("0").rstrip(".")


def _text(x: float, y: float, content: str, *, anchor: str = "middle", size: int = 12) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"'
        f' fill="{MUTED}">{escape(content)}</text>'
    )


def _open(frame: _Frame, title: str, description: str) -> None:
    frame.parts.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}"'
        f' width="{frame.width}" height="{frame.height}" role="img"'
        f" aria-label={quoteattr(title)} font-family={quoteattr(FONT)}>"
        f"<title>{escape(title)}</title><desc>{escape(description)}</desc>"
        f'<rect width="{frame.width}" height="{frame.height}" fill="#ffffff"/>'
    )


def _axes(frame: _Frame, *, every: int) -> None:
    """Grid lines with their values (4 steps up to the top) and the labels under the slots."""
    for i in range(GRID_STEPS + 1):
        value = frame.top * i / GRID_STEPS
        y = frame.y(value)
        frame.parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{frame.width - MARGIN_RIGHT}" y1="{y:.1f}"'
            f' y2="{y:.1f}" stroke="{GRID}" stroke-width="1"/>'
        )
        label = number(value) + (f" {frame.unit}" if frame.unit and i == GRID_STEPS else "")
        frame.parts.append(_text(MARGIN_LEFT - 6, y + 4, label, anchor="end", size=11))
    for index, label in enumerate(frame.labels):
        if index % every:
            continue
        x, width = frame.slot(index)
        frame.parts.append(_text(x + width / 2, frame.height - MARGIN_BOTTOM + 16, label, size=11))


def _legend(frame: _Frame, names: Sequence[str], marks: Sequence[Mark] = ()) -> None:
    x = MARGIN_LEFT
    for index, name in enumerate(names):
        colour = PALETTE[index % len(PALETTE)]
        frame.parts.append(
            f'<rect x="{x}" y="10" width="10" height="10" rx="2" fill="{colour}"/>'
            + _text(x + 14, 19, name, anchor="start")
        )
        x += 26 + 7 * len(name)
    for mark in marks:
        frame.parts.append(
            f'<line x1="{x}" x2="{x + 14}" y1="15" y2="15" stroke="{INK}"'
            ' stroke-width="1.5" stroke-dasharray="4 3"/>'
            + _text(x + 18, 19, mark.label, anchor="start")
        )
        x += 32 + 7 * len(mark.label)


def _marks(frame: _Frame, marks: Sequence[Mark]) -> None:
    for mark in marks:
        y = frame.y(mark.value)
        frame.parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{frame.width - MARGIN_RIGHT}" y1="{y:.1f}"'
            f' y2="{y:.1f}" stroke="{INK}" stroke-width="1.5" stroke-dasharray="4 3">'
            f"<title>{escape(mark.label)}: {number(mark.value)}</title></line>"
        )


GRID_STEPS = 4


def _top(values: list[float], marks: Sequence[Mark], *, whole: bool) -> float:
    """The axis top: GRID_STEPS nice steps (1, 2, 2.5 or 5 × 10^k each) covering every value;
    `whole` (counts): steps of at least 1, and whole (2.5 becomes 5 below 10)."""
    peak = max([*values, *(m.value for m in marks), 0.0])
    step = nice_ceiling(peak / GRID_STEPS)
    if whole:
        step = 5.0 if step == 2.5 else max(step, 1.0)
    return GRID_STEPS * step


def _every(labels: Sequence[str], width: int) -> int:
    """Show every n-th label so that they do not overlap (~7 px a character)."""
    longest = max((len(label) for label in labels), default=1)
    room = (width - MARGIN_LEFT - MARGIN_RIGHT) / max(len(labels), 1)
    return max(1, math.ceil((longest * 7 + 8) / room))


def bar_chart(
    *,
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    stacked: bool = False,
    unit: str = "",
    marks: Sequence[Mark] = (),
    description: str = "",
    whole: bool = False,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Bars per label: one per series side by side, or stacked. `whiskers` on a series draw a
    tick at a second value (say p95 above a p50 bar); `whole`: the values are counts."""
    if stacked:
        totals = [sum(s.values[i] or 0 for s in series) for i in range(len(labels))]
        peaks = totals
    else:
        peaks = [v or 0 for s in series for v in (*s.values, *(s.whiskers or ()))]
    top = _top(list(peaks), marks, whole=whole)
    frame = _Frame(labels=labels, top=top, unit=unit, width=width, height=height)
    _open(frame, title, description or _describe(labels, series, unit))
    _axes(frame, every=_every(labels, width))
    base = [0.0] * len(labels)
    for s_index, s in enumerate(series):
        colour = PALETTE[s_index % len(PALETTE)]
        for index, value in enumerate(s.values):
            if value is None:
                continue
            x, slot = frame.slot(index)
            gap = slot * 0.18
            if stacked:
                bar_x, bar_w = x + gap, slot - 2 * gap
                bottom, top = base[index], base[index] + value
                base[index] = top
            else:
                bar_w = (slot - 2 * gap) / len(series)
                bar_x = x + gap + s_index * bar_w
                bottom, top = 0.0, value
            y_top, y_bottom = frame.y(top), frame.y(bottom)
            tip = f"{labels[index]} · {s.name}: {number(value)}{' ' + unit if unit else ''}"
            whisker = s.whiskers[index] if s.whiskers else None
            if whisker is not None:
                tip += f" (to {number(whisker)})"
            frame.parts.append(
                f'<rect x="{bar_x:.1f}" y="{y_top:.1f}" width="{max(bar_w - 1, 1):.1f}"'
                f' height="{max(y_bottom - y_top, 0):.1f}" fill="{colour}">'
                f"<title>{escape(tip)}</title></rect>"
            )
            if whisker is not None and not stacked:
                y_w, mid = frame.y(whisker), bar_x + bar_w / 2 - 0.5
                frame.parts.append(
                    f'<line x1="{mid:.1f}" x2="{mid:.1f}" y1="{y_w:.1f}" y2="{y_top:.1f}"'
                    f' stroke="{INK}" stroke-width="1"/><line x1="{mid - bar_w / 4:.1f}"'
                    f' x2="{mid + bar_w / 4:.1f}" y1="{y_w:.1f}" y2="{y_w:.1f}" stroke="{INK}"'
                    ' stroke-width="1"/>'
                )
    _marks(frame, marks)
    _legend(frame, [s.name for s in series], marks)
    frame.parts.append("</svg>")
    return "".join(frame.parts)


def line_chart(
    *,
    title: str,
    labels: Sequence[str],
    series: Sequence[Series],
    unit: str = "",
    marks: Sequence[Mark] = (),
    description: str = "",
    whole: bool = False,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """One line per series across the labels, a dot on each value."""
    peaks = [v or 0 for s in series for v in s.values]
    top = _top(peaks, marks, whole=whole)
    frame = _Frame(labels=labels, top=top, unit=unit, width=width, height=height)
    _open(frame, title, description or _describe(labels, series, unit))
    _axes(frame, every=_every(labels, width))
    for s_index, s in enumerate(series):
        colour = PALETTE[s_index % len(PALETTE)]
        points = []
        for index, value in enumerate(s.values):
            if value is None:
                continue
            x, slot = frame.slot(index)
            points.append((x + slot / 2, frame.y(value), index, value))
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
            frame.parts.append(
                f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>'
            )
        for x, y, index, value in points:
            tip = f"{labels[index]} · {s.name}: {number(value)}{' ' + unit if unit else ''}"
            frame.parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}">'
                f"<title>{escape(tip)}</title></circle>"
            )
    _marks(frame, marks)
    _legend(frame, [s.name for s in series], marks)
    frame.parts.append("</svg>")
    return "".join(frame.parts)


def _describe(labels: Sequence[str], series: Sequence[Series], unit: str) -> str:
    """The chart's numbers as one sentence per series (its `<desc>`)."""
    suffix = f" {unit}" if unit else ""
    return " ".join(
        f"{s.name}: "
        + ", ".join(
            f"{label} {number(v)}{suffix}"
            for label, v in zip(labels, s.values, strict=False)
            if v is not None
        )
        + "."
        for s in series
    )

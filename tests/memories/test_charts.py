"""`memories.charts`: SVG drawn from numbers, safe to place in a page and to write to a file."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from memories.charts import Mark, Series, bar_chart, line_chart, nice_ceiling, number

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)  # well-formed XML, or this raises


def test_names_and_labels_are_escaped_and_no_style_or_script_is_emitted():
    svg = bar_chart(
        title='Hostile "title" <x>',
        labels=["<img src=x onerror=alert(1)>", "b"],
        series=[Series("</svg><script>alert(1)</script>", [1, 2])],
    )
    root = parse(svg)
    assert "<script" not in svg and "<img" not in svg and "style=" not in svg
    assert root.find(f"{SVG}title").text == 'Hostile "title" <x>'
    assert root.get("role") == "img"


def test_stacked_bars_add_up_and_every_bar_says_its_value():
    svg = bar_chart(
        title="t",
        labels=["Mon", "Tue"],
        series=[Series("a", [3, 0]), Series("b", [4, 1])],
        stacked=True,
    )
    tips = [t.text for t in parse(svg).iter(f"{SVG}title")][1:]
    assert tips == ["Mon · a: 3", "Tue · a: 0", "Mon · b: 4", "Tue · b: 1"]
    heights = [
        float(r.get("height"))
        for r in parse(svg).iter(f"{SVG}rect")
        if r.find(f"{SVG}title") is not None
    ]
    # Mon's two bars together are 7 of the axis's 8 (four whole steps of 2): 7/8 of its height.
    plot = 240 - 34 - 30
    assert abs(heights[0] + heights[2] - plot * 7 / 8) < 0.2
    assert re.search(r">8<", svg)  # the axis top: 4 steps of 2, the smallest covering 7


def test_whiskers_marks_and_the_description_carry_the_numbers():
    svg = bar_chart(
        title="latency",
        labels=["store"],
        series=[Series("10k", [6.9], whiskers=[10.1])],
        marks=[Mark(10, "target")],
        unit="ms",
    )
    assert "store · 10k: 6.9 ms (to 10.1)" in svg
    assert "target: 10" in svg
    assert parse(svg).find(f"{SVG}desc").text == "10k: store 6.9 ms."


def test_lines_skip_missing_values_and_the_output_is_deterministic():
    args = {"title": "t", "labels": ["a", "b", "c"], "series": [Series("s", [1, None, 3])]}
    first, second = line_chart(**args), line_chart(**args)
    assert first == second
    assert len(list(parse(first).iter(f"{SVG}circle"))) == 2


def test_axis_tops_and_numbers_read_well():
    assert [nice_ceiling(v) for v in (0, 0.7, 3, 7, 12, 230, 999)] == [
        0.25,
        1,
        5,
        10,
        20,
        250,
        1000,
    ]
    assert [number(v) for v in (0, 0.5, 12.34, 150.6, 1200, 3_500_000)] == [
        "0",
        "0.5",
        "12.3",
        "151",
        "1.2k",
        "3.5M",
    ]

"""The API renderer writes what DRF's JSONRenderer writes."""

from __future__ import annotations

import datetime
import decimal
import json
import uuid

import pytest
from django.utils.functional import lazy
from rest_framework.renderers import JSONRenderer

from memoryhub.renderers import FastJSONRenderer

lazy_text = lazy(lambda: "lazy text", str)

PAYLOADS = [
    {"ok": True, "memory": None, "tags": ["a", "b"], "n": 3, "x": 0.5},
    {"text": "Zoë’s café — 東京 \u2028 line \u2029 para \x00 nul"},
    {"when": datetime.datetime(2026, 11, 23, 3, 20, 26, 247562, tzinfo=datetime.UTC)},
    {"day": datetime.date(2026, 11, 23), "at": datetime.time(3, 20)},
    {"price": decimal.Decimal("1.10"), "id": uuid.UUID(int=7), "lazy": lazy_text()},
    {1: "int key", "nested": [{"deep": [[], {}]}]},
    {"huge": 2**80},
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_same_bytes_as_drf(payload):
    assert FastJSONRenderer().render(payload) == JSONRenderer().render(payload)


def test_floats_round_trip_and_indent_falls_back():
    payload = {"relevance": [0.1 + 0.2, 1e-7, 123456.789, 1e300]}
    assert json.loads(FastJSONRenderer().render(payload)) == payload
    pretty = FastJSONRenderer().render(payload, "application/json; indent=2")
    assert pretty == JSONRenderer().render(payload, "application/json; indent=2")
    assert FastJSONRenderer().render(None) == b""


def test_fragments_are_written_as_they_are_even_pretty_printed():
    import orjson

    body = {"entries": [orjson.Fragment(b'{"id":"mem_1","n":1.0}')], "ok": True}
    assert FastJSONRenderer().render(body) == b'{"entries":[{"id":"mem_1","n":1.0}],"ok":true}'
    pretty = FastJSONRenderer().render(body, "application/json; indent=2")
    assert json.loads(pretty) == {"entries": [{"id": "mem_1", "n": 1.0}], "ok": True}
    assert b'\n  "entries"' in pretty

"""Cursor strings are held by clients (API) and links (console): pin them byte for byte."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from memories.cursors import WalkCursor, decode_position, encode_position
from memoryhub.errors import InvalidInput

AS_OF = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
UPDATED = datetime(2026, 2, 28, 9, 0, tzinfo=UTC)
MEMORY_ID = "mem_01HZX5P8Q3W2E4R6T8Y0V2J4K6"
API_CURSOR = (
    "WyIyMDI2LTAzLTAxVDEyOjMwOjA1LjEyMzQ1NloiLCAiMjAyNi0wMi0yOFQwOTowMDowMC4wMDAwMDBaIiwgIm1lbV8w"
    "MUhaWDVQOFEzVzJFNFI2VDhZMFYySjRLNiJd"
)


def test_api_walk_cursor_is_the_one_clients_hold():
    cursor = WalkCursor(as_of=AS_OF, updated_at=UPDATED, memory_id=MEMORY_ID)
    assert cursor.encode() == API_CURSOR
    assert WalkCursor.decode(API_CURSOR) == cursor


@pytest.mark.parametrize("bad", ["garbage", "", "e30", "WzFd", "W10"])
def test_api_walk_cursor_refuses_anything_else(bad):
    with pytest.raises(InvalidInput):
        WalkCursor.decode(bad)


@pytest.mark.parametrize(
    ("value", "pk", "cursor"),
    [
        (
            AS_OF,
            MEMORY_ID,
            "W3sidCI6IjIwMjYtMDMtMDFUMTI6MzA6MDUuMTIzNDU2KzAwOjAwIn0sIm1lbV8wMUhaWDVQOFEzVzJFNFI2VDhZ"
            "MFYySjRLNiJd",
        ),
        (0.75, "mem_x", "WzAuNzUsIm1lbV94Il0"),
        (1234, 1233, "WzEyMzQsMTIzM10"),
    ],
)
def test_console_position_cursor_keeps_its_shape(value, pk, cursor):
    assert encode_position(value, pk) == cursor
    assert decode_position(cursor) == (value, pk)


def test_console_position_cursor_restarts_on_garbage():
    assert decode_position("garbage") is None

"""Counting the client/server round trips on Django's connection, not its statements: a
pipeline (`memoryhub.pipeline.pipelined`) sends several statements for one answer, and psycopg
sends a transaction's BEGIN by itself before its first statement.

libpq's trace of the protocol's messages tells: a round trip is a run of messages the client
sent (`F`) answered by the server (`B`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.db import connection
from psycopg import pq


@dataclass
class RoundTrips:
    """What a `round_trips()` block sent: `count` round trips, and each one's messages sent
    (`Parse\t "" "SELECT …" 0`, `Query\t "BEGIN"`, …)."""

    sent: list[list[str]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.sent)

    @property
    def statements(self) -> list[int]:
        """How many statements each round trip sent (a Query, or an Execute: a prepared
        statement's Bind names it, not its text)."""
        return [
            sum(message.startswith(("Query", "Execute")) for message in sent) for sent in self.sent
        ]


def parse_trace(lines: list[str]) -> RoundTrips:
    """The round trips of a libpq trace (timestamps suppressed): each a run of `F` lines the
    server answered, by the messages sent (a Query's text, or Parse's statement)."""
    found = RoundTrips()
    sending: list[str] | None = None
    for line in lines:
        direction, _, message = ([*line.split("\t", 2), "", ""])[:3]  # F/B, length, message
        if direction == "F":
            if sending is None:
                sending = []
            sending.append(message)
        elif direction == "B" and sending is not None:
            found.sent.append(sending)
            sending = None
    return found


@contextmanager
def round_trips() -> Iterator[RoundTrips]:
    """Counts the round trips of Django's connection in the block (filled in at its end)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    found = RoundTrips()
    fd, path = tempfile.mkstemp(prefix="pq-trace-")
    try:
        pgconn.trace(fd)  # line-buffered by libpq
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        try:
            yield found
        finally:
            pgconn.untrace()
        with open(path) as trace:
            found.sent = parse_trace(trace.read().splitlines()).sent
    finally:
        os.close(fd)
        os.unlink(path)

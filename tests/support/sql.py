"""Statements as PostgreSQL receives them, for tests comparing a compiled statement with the one
built for a request."""

from __future__ import annotations

import psycopg
from django.db import connection


def rendered(sql: str, params: list) -> str:
    """The statement with its parameters written in, as a client-side cursor sends it: a
    statement compiled with its constants as literals (`memories.compiled.inline_constants`)
    renders as the one built with them as parameters."""
    connection.ensure_connection()
    return psycopg.ClientCursor(connection.connection).mogrify(sql, params)

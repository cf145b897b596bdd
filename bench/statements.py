"""Where PostgreSQL's time goes under `bench --load --statements`: pg_stat_statements, reset when
the warm-up ends and read when the timed window ends, each statement per request of the load.

The bench's throwaway server loads the module (`embedded_db.STATEMENT_STATS_SETTINGS`); these
functions run on the bench process's own connection to it. Times are PostgreSQL's own: execution
and planning, wall time inside the backend (on a busy machine, waiting for a CPU counts too), so
they tell which statement to work on, not what a request costs. Query texts come normalised
(constants as `$n`), so no value a request sent is shown.
"""

from __future__ import annotations

import re

from django.db import connection

# Statements shown, most time first; the rest are summed as one line.
TOP = 12
QUERY_CHARS = 150
# The bench's own statements in the window (the reset, this read) are left out.
OWN = "pg_stat_statements"


def reset() -> None:
    """Start counting now (the extension is created on first use)."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        cursor.execute("SELECT pg_stat_statements_reset()")


def read(requests: int, top: int = TOP) -> dict:
    """The statements counted since `reset`, per request of the `requests` answered: calls,
    execution and planning ms, and each one's share of the total."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT query, calls, total_exec_time, total_plan_time, rows "
            "FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        rows = [row for row in cursor.fetchall() if OWN not in row[0]]
    rows.sort(key=lambda row: row[2] + row[3], reverse=True)
    total = sum(row[2] + row[3] for row in rows)
    per = max(requests, 1)

    def entry(query: str, calls: int, exec_ms: float, plan_ms: float, found: int) -> dict:
        return {
            "query": _short(query),
            "calls_per_request": round(calls / per, 3),
            "exec_ms_per_request": round(exec_ms / per, 3),
            "plan_ms_per_request": round(plan_ms / per, 3),
            "rows_per_call": round(found / calls, 1) if calls else 0.0,
            "share": round((exec_ms + plan_ms) / total, 3) if total else 0.0,
        }

    shown = [entry(*row) for row in rows[:top]]
    rest = rows[top:]
    if rest:
        shown.append(
            entry(
                f"({len(rest)} other statements)",
                sum(row[1] for row in rest),
                sum(row[2] for row in rest),
                sum(row[3] for row in rest),
                sum(row[4] for row in rest),
            )
        )
    return {
        "requests": requests,
        "ms_per_request": round(total / per, 3),
        "statements_per_request": round(sum(row[1] for row in rows) / per, 2),
        "top": shown,
    }


def _short(query: str) -> str:
    text = re.sub(r"\s+", " ", query).strip()
    return text if len(text) <= QUERY_CHARS else text[: QUERY_CHARS - 1] + "…"


def statements_table(result: dict, out) -> None:
    out("")
    out(
        f"PostgreSQL time per request: {result['ms_per_request']:.2f} ms over "
        f"{result['statements_per_request']:.1f} statements (execution + planning, "
        "pg_stat_statements, the timed window)"
    )
    out(f"{'share':>6} {'calls':>6} {'exec ms':>8} {'plan ms':>8}  statement")
    for row in result["top"]:
        out(
            f"{row['share'] * 100:5.1f}% {row['calls_per_request']:6.2f} "
            f"{row['exec_ms_per_request']:8.3f} {row['plan_ms_per_request']:8.3f}  {row['query']}"
        )

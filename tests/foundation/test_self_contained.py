"""The product stands on its own: no file of it cites a contract document the repository does
not have (its rules are said in words, or linked in docs/), no code comment carries a
measurement (the figures live in docs/performance.md and docs/benchmarks.md, the comment keeps
the reason), and a migration a comment names by number exists."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The product's sources: the packages, the harness, the templates and our own static files,
# and the clients (their sources, tests, scripts and READMEs).
PRODUCT_DIRS = ("accounts", "memories", "memoryhub", "bench", "templates", "static", "clients")
SKIPPED_DIRS = {"node_modules", "dist", "build", "__pycache__", ".venv", "vendor"}
SKIPPED_FILES = {"package-lock.json"}
SUFFIXES = {".py", ".html", ".js", ".mjs", ".ts", ".sh", ".md", ".json", ".toml", ".css", ".txt"}
# The benchmark harness measures: its comments may say what it measured.
MEASURING_DIRS = ("bench",)
MIGRATION_DIRS = (ROOT / "memories" / "migrations", ROOT / "accounts" / "migrations")

# The contract document's name as a word of its own (drf-spectacular's setting is no citation), or a
# bare section sign with a number.
CITATION = re.compile(r"\b[S]PEC\b|§\s*\d")  # [S]: this file is no citation itself
# A figure with a unit of time, throughput or share, on a line that also compares or measures.
FIGURE = re.compile(r"\d(?:[\d.,]*\d)?\s*(?:ms|µs|req/s|rps|MB/s|%|×)(?![\w/])")
MEASURING = re.compile(r"\b(?:p50|p95|p99|median|measured|faster|slower|against)\b", re.I)
MIGRATION_NUMBER = re.compile(r"\bmigrations?\s+(\d{4})\b", re.I)
# A comment line of the sources that are not Python: `//`, `/* … */` and `#` comments.
OTHER_COMMENT = re.compile(r"^\s*(?://|/\*|\*|#)")


def product_files() -> list[Path]:
    files = []
    for top in PRODUCT_DIRS:
        for path in sorted((ROOT / top).rglob("*")):
            parts = set(path.relative_to(ROOT).parts)
            wanted = path.suffix in SUFFIXES and path.name not in SKIPPED_FILES
            if wanted and path.is_file() and not parts & SKIPPED_DIRS:
                files.append(path)
    return files


def comment_lines(path: Path, text: str) -> list[tuple[int, str]]:
    """(line number, text) of every comment line: for Python its `#` comments and docstrings
    (read with `tokenize` and `ast`, so a string that is data is not taken for one)."""
    if path.suffix != ".py":
        return [
            (number, line)
            for number, line in enumerate(text.splitlines(), 1)
            if OTHER_COMMENT.match(line)
        ]
    lines = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            lines.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = node.body[0] if node.body else None
        value = first.value if isinstance(first, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            source = text.splitlines()[value.lineno - 1 : value.end_lineno]
            lines.extend((value.lineno + i, line) for i, line in enumerate(source))
    return sorted(lines)


def is_measurement(line: str) -> bool:
    return bool(FIGURE.search(line) and MEASURING.search(line))


def existing_migrations() -> set[str]:
    return {path.name[:4] for folder in MIGRATION_DIRS for path in folder.glob("[0-9]*.py")}


def where(path: Path, number: int, line: str) -> str:
    return f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}"


@pytest.mark.parametrize(
    "line",
    [
        "    # search with a `subject_id` took 137 / 465 ms p50 / p95 against 67 / 90, with `categories`",
        "    750-870 req/s against 635 at 4; each process's share of PostgreSQL's connections is sized",
        "# which fails on this graph, and graph fusions, 7 % faster passes): not an error.",
        "Measured on a loaded 2-core box: 16 KB of English or German prose in 0.5-1 ms, of CJK or",
        "# every call 2× faster at p50",
    ],
)
def test_the_measurement_rule_catches_a_figure_in_a_comment(line):
    assert is_measurement(line)


@pytest.mark.parametrize(
    "line",
    [
        "# A pool thread spins 50 µs for its next piece of work, then sleeps: long enough to",
        "# Latencies from a recall (~1 ms) to a slow export or an LLM call.",
        "# fillfactor 75: at 75 % a page takes three and keeps room for one updated row",
        "# faster on two cores (docs/performance.md#code-figures)",
    ],
)
def test_the_measurement_rule_leaves_a_setting_or_a_reason_alone(line):
    assert not is_measurement(line)


def test_no_product_file_cites_a_contract_document():
    found = [
        where(path, number, line)
        for path in product_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if CITATION.search(line)
    ]
    assert not found, "say the rule in words or link docs/:\n" + "\n".join(found)


def test_no_code_comment_carries_a_measurement():
    found = [
        where(path, number, line)
        for path in product_files()
        if path.relative_to(ROOT).parts[0] not in MEASURING_DIRS
        and path.suffix in {".py", ".js", ".mjs", ".ts", ".sh"}
        for number, line in comment_lines(path, path.read_text(encoding="utf-8"))
        if is_measurement(line)
    ]
    assert not found, (
        "figures belong in docs/performance.md or docs/benchmarks.md; keep the reason:\n"
        + "\n".join(found)
    )


def test_every_migration_a_product_file_names_exists():
    existing = existing_migrations()
    found = [
        where(path, number, line)
        for path in product_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for cited in MIGRATION_NUMBER.findall(line)
        if cited not in existing
    ]
    assert not found, "no such migration:\n" + "\n".join(found)

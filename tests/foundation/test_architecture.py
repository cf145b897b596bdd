"""The house rules that keep the layout honest (docs/ARCHITECTURE.md): small modules, and no
import cycles between the application's modules, none hidden by a late or type-only import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each package and the directory it is imported from (the Python client is its own
# distribution under clients/python, held to the same rules).
PACKAGES = {
    "accounts": ".",
    "memories": ".",
    "memoryhub": ".",
    "memoryhub_client": "clients/python",
}
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    found = {}
    for package, where in PACKAGES.items():
        base = ROOT / where
        for path in (base / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every application module `path` imports, wherever the import statement stands: at the
    top, in a function, under `TYPE_CHECKING`. A late or type-only import hides a cycle from
    the interpreter, not from the design (docs/ARCHITECTURE.md: none hidden either way)."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets.add(node.module)
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in modules}


def test_no_application_module_is_over_600_lines():
    long = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_no_import_cycles():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    # A package's __init__ is imported with each submodule; an edge into a submodule also
    # runs its package's __init__ (and those are docstring-only or pure re-exports here).
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, [*stack, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The check above would fail on a real cycle (it is not vacuous)."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "memories" / "a.py").write_text("from memories import b\n")
    (tmp_path / "memories" / "b.py").write_text("from memories.a import x\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    try:
        test_no_import_cycles()
    except AssertionError:
        return
    raise AssertionError("a cycle between memories.a and memories.b went unnoticed")


def test_the_cycle_check_sees_a_cycle_hidden_by_a_late_import(tmp_path, monkeypatch):
    """A cycle closed by an import inside a function, or under TYPE_CHECKING, is one too."""
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "memories" / "a.py").write_text("from memories import b\n")
    (tmp_path / "memories" / "b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from memories.c import y\n"
        "def f():\n    from memories.a import x\n"
    )
    (tmp_path / "memories" / "c.py").write_text("")
    monkeypatch.setattr(__import__(__name__, fromlist=["ROOT"]), "ROOT", tmp_path)
    try:
        test_no_import_cycles()
    except AssertionError:
        return
    raise AssertionError("a cycle closed inside a function went unnoticed")

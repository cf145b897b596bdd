"""The house rules that keep the layout honest (docs/ARCHITECTURE.md): small modules, no
import cycles between the application's modules, none hidden by a late or type-only import,
a product that never imports the benchmark harness (the repository's `bench/`, not part
of the installed package), services and reads that never import the surfaces answering with
them (REST, console, MCP), accounts' services below memories, and one entry point of a policy
change."""

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
    # Not shipped, but held to the same rules.
    "bench": ".",
}
# What the wheel ships (pyproject.toml's packages.find).
PRODUCT = ("accounts", "memories", "memoryhub")
# The commands that hand `manage.py bench` / `eval_extraction` over to the harness: each imports
# it inside a function, so that the product loads without it.
HARNESS_COMMANDS = {
    "memories.management.commands.bench",
    "memories.management.commands.eval_extraction",
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


def _empty_packages(root: Path, packages) -> None:
    """The packages as empty directories under `root`, for the checks' own tests."""
    for package in packages:
        (root / package).mkdir()
        (root / package / "__init__.py").write_text("")


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
                cycles.append([*stack[stack.index(target) :], target])
            elif target not in state:
                visit(target, [*stack, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_cycle_check_sees_a_cycle(tmp_path, monkeypatch):
    """The check above would fail on a real cycle (it is not vacuous)."""
    _empty_packages(tmp_path, PACKAGES)
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
    _empty_packages(tmp_path, PACKAGES)
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


def _bench_imports(root: Path) -> dict[str, set[int]]:
    """Every module of the product under `root` (migrations included) that imports `bench`,
    with the line numbers of those imports: statements anywhere (top, function, under
    `TYPE_CHECKING`) and `importlib.import_module("bench…")` / `__import__("bench…")`."""

    def is_bench(name: str | None) -> bool:
        return name is not None and (name == "bench" or name.startswith("bench."))

    found: dict[str, set[int]] = {}
    for package in PRODUCT:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    hit = any(is_bench(alias.name) for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    hit = not node.level and is_bench(node.module)
                elif isinstance(node, ast.Call) and node.args:
                    func = node.func
                    called = (
                        func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    )
                    first = node.args[0]
                    hit = (
                        called in ("import_module", "__import__")
                        and isinstance(first, ast.Constant)
                        and isinstance(first.value, str)
                        and is_bench(first.value)
                    )
                else:
                    hit = False
                if hit:
                    found.setdefault(name, set()).add(node.lineno)
    return found


def _top_level_lines(path: Path) -> set[int]:
    """The lines of the module's top-level statements (an import there runs on import)."""
    return {node.lineno for node in ast.parse(path.read_text()).body}


def test_nothing_in_the_product_imports_the_bench():
    found = _bench_imports(ROOT)
    assert set(found) == HARNESS_COMMANDS
    for name in HARNESS_COMMANDS:
        path = ROOT / (name.replace(".", "/") + ".py")
        assert found[name].isdisjoint(_top_level_lines(path)), name  # only inside a function


def test_the_bench_import_check_sees_late_and_dynamic_imports(tmp_path):
    """The check above would see the bench imported anywhere in the product (not vacuous)."""
    _empty_packages(tmp_path, PRODUCT)
    (tmp_path / "memories" / "a.py").write_text("def f():\n    from bench.latency import x\n")
    (tmp_path / "memoryhub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench\n"
    )
    (tmp_path / "accounts" / "c.py").write_text(
        "import importlib\nimportlib.import_module('bench.load')\n"
    )
    (tmp_path / "accounts" / "d.py").write_text("import benchmarks\nfrom .bench import y\n")
    assert _bench_imports(tmp_path) == {"memories.a": {2}, "memoryhub.b": {3}, "accounts.c": {2}}


# The layers below the surfaces that answer (REST, console, MCP): they return plain data and
# never import a surface, not even inside a function or under TYPE_CHECKING.
BELOW_THE_SURFACES = (
    "memories.services",
    "memories.retrieval",
    "memories.selectors",
    "accounts.services",
)
SURFACES = ("memories.api", "memories.console", "memories.mcp", "memories.mcp_server")


def _within(name: str, packages) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def _surface_imports(root: Path) -> dict[str, set[str]]:
    """Every module below the surfaces under `root` that imports a surface (statements anywhere,
    `importlib.import_module` / `__import__` with a constant name), with what it imports."""
    found: dict[str, set[str]] = {}
    for package in PRODUCT:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if not _within(name, BELOW_THE_SURFACES):
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                targets: list[str] = []
                if isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                elif isinstance(node, ast.Call) and node.args:
                    func, first = node.func, node.args[0]
                    called = (
                        func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                    )
                    if (
                        called in ("import_module", "__import__")
                        and isinstance(first, ast.Constant)
                        and isinstance(first.value, str)
                    ):
                        targets = [first.value]
                hits = {t for t in targets if _within(t, SURFACES)}
                if hits:
                    found.setdefault(name, set()).update(hits)
    return found


def test_services_and_reads_never_import_a_surface():
    assert _surface_imports(ROOT) == {}


def test_the_surface_import_check_sees_every_kind_of_import(tmp_path):
    """The check above would see a surface imported anywhere below them (not vacuous)."""
    _empty_packages(tmp_path, PRODUCT)
    for package in ("memories/services", "memories/retrieval", "memories/api", "memories/mcp"):
        (tmp_path / package).mkdir()
    (tmp_path / "memories" / "services" / "a.py").write_text(
        "def f():\n    from memories.api.views import x\n"
    )
    (tmp_path / "memories" / "retrieval" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from memories import console\n"
    )
    (tmp_path / "memories" / "selectors.py").write_text("import memories.mcp_server\n")
    (tmp_path / "accounts" / "services.py").write_text(
        "import importlib\nimportlib.import_module('memories.mcp.tools')\n"
    )
    # Not below the surfaces, or not a surface: left alone.
    (tmp_path / "memories" / "api" / "c.py").write_text("from memories.console import y\n")
    (tmp_path / "memories" / "services" / "d.py").write_text("from memories.apis import z\n")
    assert _surface_imports(tmp_path) == {
        "memories.services.a": {"memories.api.views", "memories.api.views.x"},
        "memories.retrieval.b": {"memories.console"},
        "memories.selectors": {"memories.mcp_server"},
        "accounts.services": {"memories.mcp.tools"},
    }


def test_accounts_services_never_import_memories():
    """accounts sits below memories: a service that needs both (a policy change that moves
    memories' expiry) lives in memories and calls down."""
    modules = _modules()
    imported = _imports(modules["accounts.services"], modules)
    assert {name for name in imported if _within(name, ("memories",))} == set()


# A policy row's write alone leaves the stored expiry of memories stale: only the one entry
# point of a policy change calls it (`memories.services.policies`).
PRIVATE_POLICY_WRITES = {"_agent_policy_write", "_tenant_policy_write"}


def _name_used(node: ast.AST) -> str | None:
    """The name a node defines, imports or refers to (`f`, `module.f`, `import f`, `def f`)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.alias | ast.FunctionDef):
        return node.name
    return None


def test_only_the_policy_entry_point_writes_policy_rows():
    users: dict[str, set[str]] = {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if (used := _name_used(node)) in PRIVATE_POLICY_WRITES:
                users.setdefault(name, set()).add(used)
    assert users == {
        "accounts.services": PRIVATE_POLICY_WRITES,  # where they are defined
        "memories.services.policies": PRIVATE_POLICY_WRITES,
    }

"""Names that explain themselves (docs/ARCHITECTURE.md, "Layout"): no two modules of one app
share a name, and no console view or MCP tool function takes the exact name of a function of
the layers below it (the service it calls, most often), so that neither a reader nor an import
has to tell two `kinds` or two `memory_tombstone` apart."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("accounts", "memories", "memoryhub")
# `urls.py` is the name Django's `include()` and every reader expect of a URLconf; the REST
# API's and the console's each sit in their own package.
CONVENTIONAL = {"urls.py"}
# The surfaces whose functions must not take a lower layer's name.
SURFACES = ("memories/console", "memories/mcp", "memories/mcp_server.py", "accounts/console.py")
# Surfaces too (or Django's hooks), but not held to the rule: what they define is not called
# by name from the console or MCP.
NOT_BELOW = (
    "memories/api",
    "memories/templatetags",
    "memories/management",
    "accounts/management",
    "memories/admin.py",
    "accounts/admin.py",
    "accounts/views.py",
)


def _app_modules(root: Path):
    """Each app's modules, without migrations (their names are Django's) and management
    commands (a command's name is how operators call it)."""
    for app in APPS:
        for path in sorted((root / app).rglob("*.py")):
            parts = path.relative_to(root).parts
            if "migrations" in parts or parts[-3:-1] == ("management", "commands"):
                continue
            if path.name == "__init__.py":
                continue
            yield app, path.relative_to(root)


def shared_module_names(root: Path) -> dict[str, list[str]]:
    by_name: dict[tuple[str, str], list[str]] = defaultdict(list)
    for app, path in _app_modules(root):
        if path.name not in CONVENTIONAL:
            by_name[(app, path.name)].append(str(path))
    return {f"{app}: {name}": paths for (app, name), paths in by_name.items() if len(paths) > 1}


def _top_level_functions(path: Path) -> set[str]:
    return {
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }


def _under(path: Path, prefixes) -> bool:
    text = path.as_posix()
    return any(text == prefix or text.startswith(prefix + "/") for prefix in prefixes)


def surface_names_taken_from_below(root: Path) -> dict[str, list[str]]:
    """Every top-level function of a surface that bears the name of a public top-level
    function of a module below the surfaces (services, selectors, formation, retrieval, …),
    with where that one lives."""
    below: dict[str, list[str]] = defaultdict(list)
    surface: dict[str, list[str]] = defaultdict(list)
    for _, path in _app_modules(root):
        if _under(path, SURFACES):
            for name in _top_level_functions(root / path):
                surface[name].append(str(path))
        elif not _under(path, NOT_BELOW):
            for name in _top_level_functions(root / path):
                if not name.startswith("_"):
                    below[name].append(str(path))
    return {
        f"{name} in {', '.join(paths)}": below[name]
        for name, paths in surface.items()
        if name in below
    }


def test_no_two_modules_of_one_app_share_a_name():
    assert shared_module_names(ROOT) == {}


def test_no_console_or_mcp_function_takes_the_name_of_a_function_below():
    assert surface_names_taken_from_below(ROOT) == {}


def _tree(root: Path, files: dict[str, str]) -> None:
    for app in APPS:
        (root / app).mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_the_checks_see_a_shared_name_and_a_borrowed_function_name(tmp_path):
    """Both checks would fail on a real case (they are not vacuous), and leave alone what they
    should: migrations, management commands, `urls.py`, a name shared across apps."""
    _tree(
        tmp_path,
        {
            "memories/kinds.py": "def kind_list(): pass\n",
            "memories/console/kinds.py": "def kind_delete(request): pass\n",
            "memories/services/kinds.py": "def kind_delete(*, tenant): pass\n",
            "memories/mcp/tools.py": "async def memory_store(ctx): pass\n",
            "memories/services/store.py": "def memory_store(): pass\ndef _private(): pass\n",
            "memories/console/pages.py": "def _private(request): pass\n",
            "memories/api/views.py": "def kind_list(request): pass\n",
            "memories/api/urls.py": "",
            "memories/console/urls.py": "",
            "memories/migrations/0001_kinds.py": "",
            "memories/jobs/reembed.py": "",
            "memories/management/commands/reembed.py": "",
            "accounts/services.py": "",
            "memories/services/services.py": "",
        },
    )
    assert shared_module_names(tmp_path) == {
        "memories: kinds.py": [
            "memories/console/kinds.py",
            "memories/kinds.py",
            "memories/services/kinds.py",
        ]
    }
    assert surface_names_taken_from_below(tmp_path) == {
        "kind_delete in memories/console/kinds.py": ["memories/services/kinds.py"],
        "memory_store in memories/mcp/tools.py": ["memories/services/store.py"],
    }

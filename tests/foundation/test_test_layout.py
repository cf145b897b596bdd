"""The test suite's own layout: tests mirror the application (`tests/memories/api/` holds the
tests of `memories/api/`), each directory of tests is a package, and code shared between test
modules lives in `tests/support/` (or `tests/factories.py`), never in a test module or a
conftest that another module imports."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
# Besides tests/support/, the one module of shared code: the model factories every test uses.
SHARED = {TESTS / "factories.py"}


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)


def _imports_of(source: str, module: str) -> set[str]:
    """Every module the source of `module` imports, anywhere in it (a late import inside a
    function counts); `from package import name` counts `package.name` too, since `name` may be
    a module. `module` is dotted, a package's `__init__` named as the package plus `.__init__`."""
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            name = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                name = ".".join([*base, name] if name else base)
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def _imported(path: Path) -> set[str]:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return _imports_of(path.read_text(), module)


def _is_test_module_or_conftest(module: str) -> bool:
    if not module.startswith("tests."):
        return False
    last = module.rsplit(".", 1)[-1]
    return last.startswith("test_") or last == "conftest"


def test_no_module_of_the_suite_imports_a_test_module_or_a_conftest():
    offenders = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _python_files()
        for module in sorted(_imported(path))
        if _is_test_module_or_conftest(module)
    ]
    assert not offenders, "shared code belongs in tests/support/:\n" + "\n".join(offenders)


def test_code_that_is_not_a_test_lives_in_tests_support():
    misplaced = [
        str(path.relative_to(ROOT))
        for path in _python_files()
        if not (
            path.name.startswith("test_")
            or path.name in ("conftest.py", "__init__.py")
            or (TESTS / "support") in path.parents
            or path in SHARED
        )
    ]
    assert not misplaced, misplaced


def test_every_directory_of_tests_is_a_package():
    # Test modules are imported by their dotted path (tests.memories.api.test_store), so two
    # test files may share a name in different directories.
    directories = {path.parent for path in _python_files()}
    missing = sorted(
        str(d.relative_to(ROOT)) for d in directories if not (d / "__init__.py").is_file()
    )
    assert not missing, missing


def test_the_tests_of_the_memories_app_mirror_its_packages():
    # tests/memories/<package>/ holds the tests of memories/<package>/; the tests of the app's
    # top-level modules sit in tests/memories/ itself.
    directories = [
        d for d in (TESTS / "memories").iterdir() if d.is_dir() and d.name != "__pycache__"
    ]
    assert directories
    unmirrored = [
        d.name for d in directories if not (ROOT / "memories" / d.name / "__init__.py").is_file()
    ]
    assert not unmirrored, unmirrored


def test_the_layout_rules_see_what_they_forbid():
    # A late import of a test module, a relative import of a conftest and a plain import of a
    # test module are each found; a support module is not taken for a test module.
    source = (
        "def helper():\n"
        "    from tests.formation.test_runs import NOW\n"
        "from . import conftest\n"
        "from .support import jobs\n"
        "import tests.mcp.test_mcp\n"
    )
    found = _imports_of(source, "tests.events.test_feed")
    forbidden = {m for m in found if _is_test_module_or_conftest(m)}
    assert forbidden == {"tests.formation.test_runs", "tests.events.conftest", "tests.mcp.test_mcp"}
    assert "tests.events.support.jobs" in found
    assert not _is_test_module_or_conftest("tests.support.formation")
    assert not _is_test_module_or_conftest("memories.test_like_name")

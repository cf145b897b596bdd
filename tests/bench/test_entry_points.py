"""The bench's two ways in, `python -m bench` and `python manage.py bench` (and the same two for
`eval_extraction`), take the same options; and the thin commands of the installed package say
plainly when the harness (the repository's `bench/`, never shipped) is not there."""

from __future__ import annotations

import re
import sys
import tomllib

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from memories.management.commands import bench as bench_command
from tests.support.bench import run_bench

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def options(help_text: str) -> set[str]:
    return set(OPTION.findall(help_text))


@pytest.mark.parametrize(
    ("module", "command", "expected"),
    [
        ((), ("bench",), {"--quick", "--load", "--charts", "--versus-mem0", "--skip-locomo"}),
        (
            ("eval_extraction",),
            ("eval_extraction",),
            {"--dataset", "--conversations", "--roles", "--output"},
        ),
    ],
)
def test_python_m_bench_and_manage_py_take_the_same_options(module, command, expected):
    as_module = run_bench(*module, "--help", entry=("-m", "bench"), timeout=120)
    as_command = run_bench("--help", entry=("manage.py", *command), timeout=120)

    assert as_module.returncode == 0, as_module.stderr
    assert as_command.returncode == 0, as_command.stderr
    assert as_module.stdout.startswith(f"usage: {' '.join(('python -m bench', *module))} ")
    assert as_command.stdout.startswith(f"usage: manage.py {command[0]} ")
    assert expected <= options(as_module.stdout)
    assert options(as_module.stdout) == options(as_command.stdout)


@pytest.fixture
def no_harness(monkeypatch):
    """The bench package not importable, as in an installed wheel."""
    for name in [n for n in sys.modules if n == "bench" or n.startswith("bench.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "bench", None)


@pytest.mark.parametrize("name", ["bench", "eval_extraction"])
def test_without_the_harness_the_command_says_what_is_missing(no_harness, name):
    with pytest.raises(CommandError, match=r"bench/ package, which is not part of the installed"):
        call_command(name)


def test_without_the_harness_the_command_line_says_so_whatever_the_options(no_harness, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench_command.Command().run_from_argv(["manage.py", "bench", "--quick"])

    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "not part of the installed package" in err and "python -m bench" in err
    assert "unrecognized arguments" not in err


def test_the_harness_is_not_in_the_installed_package():
    """The wheel's packages are what pyproject's `packages.find` finds: the product's, with
    the thin commands, and nothing of `bench/`."""
    from setuptools import find_packages

    pyproject = tomllib.loads((settings.BASE_DIR / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    shipped = find_packages(where=settings.BASE_DIR, include=include)

    assert "memories.management.commands" in shipped and "memoryhub" in shipped
    assert {p for p in shipped if p == "bench" or p.startswith("bench.")} == set()
    assert {p.split(".")[0] for p in shipped} == {"accounts", "memories", "memoryhub"}

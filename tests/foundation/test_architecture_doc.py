"""docs/ARCHITECTURE.md names code that exists: every path it cites in backticks
(`memories/services/store.py`, `memories/services/`) is in the repository, every dotted name
(`inputs.parse_store`, `memories.inputs.parse_store`, `Memory.objects`) imports and has the
attribute, and no name is private (`_name`): the page names the public function that owns a
rule, so a rename that leaves the page behind fails here."""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "ARCHITECTURE.md"
# Where each importable package lives (the Python client is its own distribution).
PACKAGES = {
    "accounts": ROOT,
    "memories": ROOT,
    "memoryhub": ROOT,
    "bench": ROOT,
    "memoryhub_client": ROOT / "clients" / "python",
}
# The repository's top-level entries: a backticked span starting `<entry>/` is a path.
TOP_LEVEL = {path.name for path in ROOT.iterdir() if not path.name.startswith(".")}
NAME = r"[A-Za-z_]\w*"
DOTTED = re.compile(rf"({NAME}(?:\.{NAME})+)(?:\(.*)?")  # a call's arguments left out
PRIVATE = re.compile(r"(?:^|[./])_(?!_)\w*")  # `_name`, `a._b`; not a dunder


def inline_code(text: str) -> list[str]:
    """The page's inline code spans, fenced blocks left out."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


def _modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name, found on disk (nothing imported)."""
    found = {}
    for package, base in PACKAGES.items():
        for path in (base / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _walk(obj: object, names: list[str]) -> bool:
    """Whether `obj.a.b…` exists: an attribute, or a dataclass field without a default."""
    for name in names:
        if hasattr(obj, name):
            obj = getattr(obj, name)
        elif dataclasses.is_dataclass(obj) and name in {f.name for f in dataclasses.fields(obj)}:
            return name == names[-1]
        else:
            return False
    return True


def resolves(dotted: str) -> bool:
    """Whether `dotted` names a module, or an attribute of one: the leading parts are a module
    named in full (`memories.inputs`) or by its last parts (`inputs`, `services.store`), or the
    first part is a class or constant defined at the top of a module (`Memory.objects`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        prefix = ".".join(parts[:cut])
        candidates = [name for name in MODULES if name == prefix or name.endswith("." + prefix)]
        if any(_walk(importlib.import_module(name), parts[cut:]) for name in candidates):
            return True
    if parts[0] not in PACKAGES and importlib.util.find_spec(parts[0]) is not None:
        return _walk(importlib.import_module(parts[0]), parts[1:])  # a library: `orjson.Fragment`
    definition = re.compile(rf"^(?:class {parts[0]}\b|{parts[0]} = )", re.M)
    owners = [name for name, path in MODULES.items() if definition.search(path.read_text())]
    return any(_walk(importlib.import_module(name), parts) for name in owners)


def problems(text: str) -> list[str]:
    """What on a page names code that is not there, or is private."""
    found = []
    for span in inline_code(text):
        if PRIVATE.search(span) and not re.fullmatch(r"[\w./-]+\.py", span):
            found.append(f"private: {span}")
        head = span.split("/", 1)[0]
        if "/" in span and head in TOP_LEVEL and " " not in span:
            if not any(ROOT.glob(span.rstrip("/"))):
                found.append(f"no such path: {span}")
        elif re.fullmatch(r"[\w.-]+\.(?:py|ts|js|json|md|toml)", span):
            found.append(f"a file by its name alone (give its path): {span}")
        elif (match := DOTTED.fullmatch(span)) and not resolves(match.group(1)):
            found.append(f"does not resolve: {span}")
    return found


def test_every_code_name_on_the_architecture_page_exists_and_is_public():
    assert problems(PAGE.read_text()) == []


def test_the_check_catches_a_moved_function_a_missing_file_and_a_private_name():
    page = (
        "`memories/inputs.py` `memories/services/` `inputs.parse_store` "
        "`memories.inputs.parse_store` `store.memory_store()` `services.store.memory_store` "
        "`kind_registry.registry(tenant).rule(kind)` `Memory.objects` `PreparedStore.owner` "
        "`memoryhub_client.RetryPolicy` `orjson.Fragment`\n"
        "`validation.parse_store` `validation.parse_store(data, agent=)` `memories/validation/` "
        "`store._existing` `_store_write` `memories.nowhere.thing` `Memory.no_such_field` "
        "`selectors.py`\n"
        "```\n`validation.parse_store` in a fenced block is an example, not a citation\n```"
    )
    assert problems(page) == [
        "does not resolve: validation.parse_store",
        "does not resolve: validation.parse_store(data, agent=)",
        "no such path: memories/validation/",
        "private: store._existing",
        "private: _store_write",
        "does not resolve: memories.nowhere.thing",
        "does not resolve: Memory.no_such_field",
        "a file by its name alone (give its path): selectors.py",
    ]

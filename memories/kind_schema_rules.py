"""What a kind's schema must be to be registered (`kind_registry.check_schema` asks): within the size
limits, every pattern one RE2 compiles, every reference resolving as the validator will resolve
it (the library's own resolver, walked over the schema, never fetching anything), and no chain
of references and combinators coming back to a schema without descending into the data. The
validator itself, and the budget of a check, are `memories.kind_checks`'."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import referencing.exceptions
import referencing.jsonschema

from memories.kind_checks import BadPattern, compiled, validator_for

MAX_SCHEMA_DEPTH = 24  # subschemas nested in subschemas
MAX_IN_PLACE_CHAIN = 64  # references and combinators followed on one instance, end to end
MAX_SUBSCHEMAS = 500
MAX_KEYWORDS = 5_000  # keys of all the schema objects together
MAX_PATTERNS = 200  # `pattern` values and `patternProperties` keys

_DIALECT = referencing.jsonschema.DRAFT202012
# Where subschemas sit (as the resolver walks them): a keyword's value, its list's items, its
# object's values.
_IN_VALUE = (
    "additionalProperties",
    "contains",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_IN_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_IN_VALUES = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")
# The ones evaluated against the same instance as the schema that holds them (the others
# descend into the instance's items or properties, or are not evaluated unless referenced).
_IN_PLACE = frozenset(
    {
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "$ref",
        "$dynamicRef",
    }
)


class SchemaProblem(ValueError):
    """Why a schema cannot be registered, and where (a JSON pointer in it)."""

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.pointer = pointer


def _escape(part: Any) -> str:
    return str(part).replace("~", "~0").replace("/", "~1")


def _children(node: dict, pointer: str) -> Iterator[tuple[str, str, Any]]:
    """(keyword, pointer, subschema) of each subschema directly inside `node`."""
    for keyword in _IN_VALUE:
        if keyword in node:
            yield keyword, f"{pointer}/{keyword}", node[keyword]
    for keyword in _IN_LIST:
        if isinstance(node.get(keyword), list):
            for index, child in enumerate(node[keyword]):
                yield keyword, f"{pointer}/{keyword}/{index}", child
    for keyword in _IN_VALUES:
        if isinstance(node.get(keyword), dict):
            for name, child in node[keyword].items():
                yield keyword, f"{pointer}/{keyword}/{_escape(name)}", child


def _check_pattern(pattern: Any, pointer: str) -> None:
    if not isinstance(pattern, str):
        return  # the meta-schema check names it
    try:
        compiled(pattern)
    except BadPattern as exc:
        raise SchemaProblem(
            f"the pattern at {pointer or '/'} is not one this server evaluates (a linear-time "
            f"regular expression: no backreferences, no lookaround, not too large): {exc}",
            pointer,
        ) from None


def check_limits(schema: Any) -> None:
    """`SchemaProblem` when the schema's structure (its subschemas where the draft puts them)
    nests deeper, or holds more subschemas or keywords, than the limits: a cheap walk, run
    before the (costlier) check against the meta-schema."""
    subschemas = keywords = 0
    stack: list[tuple[Any, str, int]] = [(schema, "", 0)]
    while stack:
        node, pointer, depth = stack.pop()
        if not isinstance(node, dict):
            continue
        subschemas += 1
        keywords += len(node)
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaProblem(f"subschemas nest deeper than {MAX_SCHEMA_DEPTH} levels", pointer)
        if subschemas > MAX_SUBSCHEMAS:
            raise SchemaProblem(f"more than {MAX_SUBSCHEMAS} subschemas", pointer)
        if keywords > MAX_KEYWORDS:
            raise SchemaProblem(f"more than {MAX_KEYWORDS} keywords", pointer)
        stack.extend((child, where, depth + 1) for _, where, child in _children(node, pointer))


def inspect(schema: dict) -> None:
    """`SchemaProblem` unless `schema` is within the limits, its patterns compile on RE2, its
    references resolve as the validator will resolve them, and no chain of references and
    combinators comes back to a schema without descending into the data."""
    root = validator_for(schema)._resolver  # type: ignore[attr-defined]  # jsonschema's resolver
    counts = {"subschemas": 0, "keywords": 0, "patterns": 0}
    walked: set[tuple[int, str]] = set()
    nodes: dict[int, str] = {}  # id of each schema object walked -> its pointer
    in_place: dict[int, list[int]] = {}  # edges between schemas evaluated on the same instance
    stack: list[tuple[Any, str, Any, int]] = [(schema, "", root, 0)]
    while stack:
        node, pointer, resolver, depth = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise SchemaProblem(f"{pointer or '/'} is used as a schema but is not one", pointer)
        seen = (id(node), str(getattr(resolver, "_base_uri", "")))
        if seen in walked:
            continue
        walked.add(seen)
        if id(node) not in nodes:
            nodes[id(node)] = pointer
            counts["subschemas"] += 1
            counts["keywords"] += len(node)
        if depth > MAX_SCHEMA_DEPTH:
            raise SchemaProblem(f"subschemas nest deeper than {MAX_SCHEMA_DEPTH} levels", pointer)
        if counts["subschemas"] > MAX_SUBSCHEMAS:
            raise SchemaProblem(f"more than {MAX_SUBSCHEMAS} subschemas", pointer)
        if counts["keywords"] > MAX_KEYWORDS:
            raise SchemaProblem(f"more than {MAX_KEYWORDS} keywords", pointer)
        if "$schema" in node and node is not schema:
            raise SchemaProblem("'$schema' is allowed at the top of the schema only", pointer)
        edges = in_place.setdefault(id(node), [])
        patterns = []
        if "pattern" in node:
            patterns.append((node["pattern"], f"{pointer}/pattern"))
        if isinstance(node.get("patternProperties"), dict):
            patterns += [
                (name, f"{pointer}/patternProperties/{_escape(name)}")
                for name in node["patternProperties"]
            ]
        for pattern, where in patterns:
            counts["patterns"] += 1
            if counts["patterns"] > MAX_PATTERNS:
                raise SchemaProblem(f"more than {MAX_PATTERNS} patterns", where)
            _check_pattern(pattern, where)
        for keyword in ("$ref", "$dynamicRef"):
            if keyword not in node:
                continue
            ref, where = node[keyword], f"{pointer}/{keyword}"
            if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
                raise SchemaProblem(
                    f"only references within the schema are allowed ({where})", where
                )
            try:
                resolved = resolver.lookup(ref)
            except referencing.exceptions.Unresolvable:
                raise SchemaProblem(
                    f"the reference {ref[:80]} at {where} does not resolve", where
                ) from None
            target = resolved.contents
            if isinstance(target, dict):
                edges.append(id(target))
            # Its nesting is its own (and its place's, counted where it sits in the document).
            stack.append((target, ref[1:], resolved.resolver, 0))
        for keyword, where, child in _children(node, pointer):
            if isinstance(child, dict):
                if keyword in _IN_PLACE:
                    edges.append(id(child))
                inner = resolver.in_subresource(_DIALECT.create_resource(child))
            else:
                inner = resolver
            stack.append((child, where, inner, depth + 1))
    _check_in_place(in_place, nodes)


def _check_in_place(edges: dict[int, list[int]], nodes: dict[int, str]) -> None:
    """No cycle, and no chain longer than `MAX_IN_PLACE_CHAIN`, among the schemas evaluated
    against one instance (`{"allOf": [{"$ref": "#"}]}` would recurse until the stack ends)."""
    longest: dict[int, int] = {}
    on_path: set[int] = set()
    for start in edges:
        if start in longest:
            continue
        # Iterative depth-first search: (node, index of the next edge to follow).
        path = [(start, 0)]
        on_path.add(start)
        while path:
            node, index = path[-1]
            targets = edges.get(node, [])
            if index < len(targets):
                path[-1] = (node, index + 1)
                target = targets[index]
                if target in on_path:
                    raise SchemaProblem(
                        "a reference loops back to "
                        f"{nodes.get(target, '') or '/'} without descending into the data",
                        nodes.get(node, ""),
                    )
                if target not in longest:
                    on_path.add(target)
                    path.append((target, 0))
                continue
            path.pop()
            on_path.discard(node)
            longest[node] = 1 + max((longest[t] for t in targets), default=0)
            if longest[node] > MAX_IN_PLACE_CHAIN:
                raise SchemaProblem(
                    f"references and combinators chain deeper than {MAX_IN_PLACE_CHAIN} levels",
                    nodes.get(node, ""),
                )


def samples(schema: dict) -> list[Any]:
    """A few instances to exercise a new schema with: `{}`, and one with each top-level
    property set to its default, first example, or a plain value of its type."""
    plain = {
        "string": "",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "array": [],
        "object": {},
        "null": None,
    }
    filled: dict[str, Any] = {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, sub in list(properties.items())[:200]:
            if not isinstance(sub, dict):
                continue
            if "default" in sub:
                filled[name] = sub["default"]
            elif isinstance(sub.get("examples"), list) and sub["examples"]:
                filled[name] = sub["examples"][0]
            else:
                kind = sub.get("type")
                kind = kind[0] if isinstance(kind, list) and kind else kind
                filled[name] = plain.get(kind, "") if isinstance(kind, str) else ""
    return [{}, filled] if filled else [{}]

"""A kind's JSON Schema, made safe to run for any tenant: the validator every check uses, the
cost bound of one check, and what a schema must be to be registered.

One tenant's admin writes a schema; every store of the kind runs it on a worker that all tenants
share. So nothing a schema says may hold that worker for long or make a later store fail:

- `pattern`, `patternProperties` (and `additionalProperties`/`unevaluatedProperties`, which
  look at the same patterns) run on RE2, whose matching time is linear in the text: no
  backtracking, so no `^(a+)+$` blow-up. A pattern RE2 cannot compile (backreferences,
  lookaround, a program too large) is refused at registration, named by its JSON pointer.
- `uniqueItems` is one pass over canonical forms of the items (linear, JSON equality: 1 and 1.0
  equal, true and 1 not); `unevaluatedItems`/`unevaluatedProperties` look evaluated places up in
  sets (the library's lists made them quadratic).
- Every keyword evaluation and every subschema applied spends a step of a budget (a reference
  ten; `settings.MEMORYHUB_KIND_CHECK_STEPS`) and looks at a deadline (`settings.MEMORYHUB_KIND_CHECK_MS`): a check over either stops with
  `CheckTooCostly`, which callers answer as INVALID_INPUT.
- A schema is registered only if `memories.kind_schema_rules` finds it small enough, its
  references resolving and not looping, and validating a few sample instances within the
  budget raises nothing (`kind_registry.check_schema`).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import attrs
import re2
import referencing
import referencing.exceptions
from django.conf import settings
from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import (
    ValidationError,  # what a failed $ref raises
)

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
# The check of a schema against the meta-schema, at registration only: it resolves the
# meta-schema's dynamic references at every subschema, so a large schema takes a while.
META_CHECK_MS = 2_000

# RE2: no capture groups needed (we only ask whether a pattern matches), errors not logged to
# stderr, and at most 2 MiB a regex (program and matching caches): `^\p{L}{1,100}$` fits, and one
# search over a 64 KiB string stays under ~0.1 s even when RE2 cannot use its DFA.
_RE2_MAX_MEM = 2 << 20
_REGEX_CACHE_SIZE = 128


class CheckTooCostly(Exception):
    """A check ran past its budget (steps or time)."""


class BadPattern(ValueError):
    """A pattern RE2 cannot evaluate."""


# --- patterns --------------------------------------------------------------------------------


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False
    options.never_capture = True
    options.max_mem = _RE2_MAX_MEM
    return options


def _ecma_escapes(pattern: str) -> str:
    """ECMA-262 spells a code point `\\uXXXX` (and `\\u{X…}`), RE2 `\\x{XXXX}`: translate those,
    leave every other escape alone (a backslash and its character are copied as a pair)."""
    if "\\u" not in pattern:
        return pattern
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            nxt = pattern[i + 1]
            if nxt == "u":
                hex4 = pattern[i + 2 : i + 6]
                if len(hex4) == 4 and all(c in "0123456789abcdefABCDEF" for c in hex4):
                    out.append(f"\\x{{{hex4}}}")
                    i += 6
                    continue
                if pattern[i + 2 : i + 3] == "{":
                    end = pattern.find("}", i + 3)
                    if end != -1:
                        out.append(f"\\x{{{pattern[i + 3 : end]}}}")
                        i = end + 1
                        continue
            out.append(pattern[i : i + 2])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


@functools.lru_cache(maxsize=_REGEX_CACHE_SIZE)
def compiled(pattern: str):
    """The RE2 program of a JSON Schema pattern (cached per process); `BadPattern` when RE2
    cannot compile it."""
    try:
        return re2.compile(_ecma_escapes(pattern), _options())
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise BadPattern(str(reason)) from None


def matches(pattern: str, text: str) -> bool:
    """Whether `pattern` matches somewhere in `text` (JSON Schema patterns are not anchored)."""
    spend(1 + len(text) // 4096)
    return compiled(pattern).search(text) is not None


# The format checker of the schema check against the meta-schema: the library's, less
# `"format": "regex"` (which the meta-schema puts on `pattern` and `patternProperties`' names and
# the library checks with Python's `re`): `inspect` compiles every pattern with RE2 instead, as
# the validator will, and names it by its JSON pointer.
META_FORMAT_CHECKER = FormatChecker()
META_FORMAT_CHECKER.checkers = {
    name: check
    for name, check in Draft202012Validator.FORMAT_CHECKER.checkers.items()
    if name != "regex"
}


# --- the budget ------------------------------------------------------------------------------


class _Budget:
    __slots__ = ("deadline", "steps")

    def __init__(self, steps: int, seconds: float) -> None:
        self.steps = steps
        self.deadline = time.monotonic() + seconds


_BUDGET: ContextVar[_Budget | None] = ContextVar("memoryhub_kind_check_budget", default=None)


def spend(steps: int = 1) -> None:
    """Spend from the running check's budget (nothing outside a check)."""
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.steps -= steps
    if budget.steps < 0 or time.monotonic() > budget.deadline:
        raise CheckTooCostly


@contextmanager
def budget(steps: int | None = None, ms: int | None = None) -> Iterator[None]:
    """Run one check under a budget: `steps` keyword evaluations, `ms` milliseconds."""
    token = _BUDGET.set(
        _Budget(
            steps if steps is not None else settings.MEMORYHUB_KIND_CHECK_STEPS,
            (ms if ms is not None else settings.MEMORYHUB_KIND_CHECK_MS) / 1000,
        )
    )
    try:
        yield
    finally:
        _BUDGET.reset(token)


def budget_message() -> str:
    return (
        "checking 'data' against the kind's schema took more than its budget "
        f"({settings.MEMORYHUB_KIND_CHECK_STEPS} steps, {settings.MEMORYHUB_KIND_CHECK_MS} ms)"
    )


# --- keywords --------------------------------------------------------------------------------


def _pattern(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not matches(patrn, instance):
        yield ValidationError(f"{instance!r} does not match {patrn!r}")


def _pattern_properties(validator, pattern_properties, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if matches(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: dict, schema: dict) -> list[str]:
    """The properties neither `properties` nor `patternProperties` covers."""
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    return [
        key
        for key in instance
        if key not in properties and not any(matches(p, key) for p in patterns)
    ]


def _additional_properties(validator, additional, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(each) for each in sorted(extras))
        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(
                f"Additional properties are not allowed ({listed} {verb} unexpected)"
            )


_TRUE, _FALSE = object(), object()  # booleans apart from 1 and 0


def canonical(value: Any) -> Any:
    """A hashable form of a JSON value whose equality is JSON Schema's: numbers by value (1 and
    1.0 equal: Python's own equality), booleans apart from numbers (true != 1), arrays in order,
    objects whatever their key order."""
    if value is True:
        return _TRUE
    if value is False:
        return _FALSE
    kind = type(value)
    if kind is list or kind is tuple:
        return tuple(map(canonical, value))
    if kind is dict:
        return frozenset((key, canonical(item)) for key, item in value.items())
    return value  # a string, a number or null


def _unique_items(validator, unique, instance, schema):
    if not unique or not validator.is_type(instance, "array"):
        return
    spend(1 + len(instance) // 64)
    seen: set = set()
    for item in instance:
        key = canonical(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _valid(errors) -> bool:
    return next(errors, None) is None


def _evaluated(validator, instance, schema, own) -> set:
    """The places of `instance` (property names, or indexes) that `schema` evaluates, for
    `unevaluatedProperties`/`unevaluatedItems`: the library's walk as a set (its lists made the
    keywords quadratic), with RE2 patterns. `own(validator, instance, schema)`: the places the
    schema's own keywords evaluate; the walk adds its references' and its applicators'."""
    spend()
    if validator.is_type(schema, "boolean"):
        return set()
    found = set(own(validator, instance, schema))
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            inner = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            found |= _evaluated(inner, instance, resolved.contents, own)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            found |= _evaluated(validator, instance, schema["if"], own)
            if "then" in schema:
                found |= _evaluated(validator, instance, schema["then"], own)
        elif "else" in schema:
            found |= _evaluated(validator, instance, schema["else"], own)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                found |= _evaluated(validator, instance, subschema, own)
    return found


def _own_keys(validator, instance: dict, schema: dict) -> set:
    keys: set = set()
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()  # type: ignore[union-attr]  # an object
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {k for k, v in instance.items() if _valid(validator.descend(v, subschema))}
    for pattern in schema.get("patternProperties", {}):
        keys |= {key for key in instance if matches(pattern, key)}
    for key, subschema in schema.get("dependentSchemas", {}).items():
        if key in instance:
            keys |= _evaluated(validator, instance, subschema, _own_keys)
    return keys


def _own_indexes(validator, instance: list, schema: dict) -> set:
    if "items" in schema:
        return set(range(len(instance)))
    indexes = set(range(len(schema.get("prefixItems", []))))
    for keyword in ("contains", "unevaluatedItems"):
        if keyword in schema:
            inner = validator.evolve(schema=schema[keyword])
            indexes |= {k for k, v in enumerate(instance) if inner.is_valid(v)}
    return indexes


def _unevaluated_properties(validator, unevaluated, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated(validator, instance, schema, _own_keys)
    failing = [
        key
        for key in instance
        if key not in evaluated
        and not _valid(validator.descend(instance[key], unevaluated, path=key, schema_path=key))
    ]
    if failing:
        listed = ", ".join(repr(each) for each in sorted(failing, key=str))
        verb = "was" if len(failing) == 1 else "were"
        if unevaluated is False:
            yield ValidationError(
                f"Unevaluated properties are not allowed ({listed} {verb} unexpected)"
            )
        else:
            yield ValidationError(
                "Unevaluated properties are not valid under the given schema "
                f"({listed} {verb} unevaluated and invalid)"
            )


def _unevaluated_items(validator, unevaluated, instance, schema):
    if not validator.is_type(instance, "array"):
        return
    evaluated = _evaluated(validator, instance, schema, _own_indexes)
    extra = [item for index, item in enumerate(instance) if index not in evaluated]
    if extra:
        listed = ", ".join(repr(each) for each in extra)
        verb = "was" if len(extra) == 1 else "were"
        yield ValidationError(f"Unevaluated items are not allowed ({listed} {verb} unexpected)")


# A reference costs about ten plain keywords (a lookup, a new validator and resolver).
_STEPS = {"$ref": 10, "$dynamicRef": 10}


def _metered(name, keyword):
    """A keyword that spends from the running check's budget each time it runs."""
    steps = _STEPS.get(name, 1)

    @functools.wraps(keyword)
    def run(validator, value, instance, schema):
        spend(steps)
        return keyword(validator, value, instance, schema)

    return run


_REPLACED = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
    "uniqueItems": _unique_items,
    "unevaluatedProperties": _unevaluated_properties,
    "unevaluatedItems": _unevaluated_items,
}

# The one validator class of kind schemas: every check (a store, a PATCH, formation, a JSONL
# import, the re-check of stored data, the console) and the schema check itself use it.
KindValidator = validators.extend(
    Draft202012Validator,
    {
        name: _metered(name, _REPLACED.get(name, keyword))
        for name, keyword in Draft202012Validator.VALIDATORS.items()
    },
)
_EVOLVE_FIELDS = [(field.name, field.alias) for field in attrs.fields(KindValidator) if field.init]


def _evolve(self, **changes):
    """The library's `evolve`, less its switch to another draft's validator class when a
    subschema names a `$schema`: a kind schema is evaluated by `KindValidator` throughout
    (the library's class has the backtracking patterns and the quadratic `uniqueItems`)."""
    changes.setdefault("schema", self.schema)
    for name, alias in _EVOLVE_FIELDS:
        if alias not in changes:
            changes[alias] = getattr(self, name)
    return KindValidator(**changes)


_descend = KindValidator.descend


def _metered_descend(self, instance, schema, *args, **kwargs):
    """Each subschema applied to a part of the instance spends a step (an empty one has no
    keyword to spend it)."""
    spend()
    return _descend(self, instance, schema, *args, **kwargs)


KindValidator.evolve = _evolve
KindValidator.descend = _metered_descend


def _no_retrieval(uri: str):
    raise referencing.exceptions.NoSuchResource(ref=uri)  # type: ignore[call-arg]  # attrs class


# Only the specifications' own meta-schemas are known; anything else is never fetched.
_REGISTRY = referencing.Registry(retrieve=_no_retrieval)  # type: ignore[call-arg]  # attrs class


def validator_for(schema: dict | bool) -> Draft202012Validator:
    """A validator of `schema` (a registered kind's), resolving references within it only.
    A top-level `$schema` (draft 2020-12, the only one registration accepts) is left out: it
    says nothing the validator does not assume."""
    if isinstance(schema, dict) and "$schema" in schema:
        schema = {key: value for key, value in schema.items() if key != "$schema"}
    return KindValidator(schema, registry=_REGISTRY)


def meta_errors(schema: Any) -> ValidationError | None:
    """The first way `schema` fails the draft 2020-12 meta-schema (None: it is a valid one),
    checked by `KindValidator` under `META_CHECK_MS`."""
    meta = KindValidator(KindValidator.META_SCHEMA, format_checker=META_FORMAT_CHECKER)
    with budget(steps=100 * settings.MEMORYHUB_KIND_CHECK_STEPS, ms=META_CHECK_MS):
        return next(meta.iter_errors(schema), None)

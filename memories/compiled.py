"""Querysets compiled to SQL once per shape and run again with each request's values.

A recall by key is one indexed row, yet building and compiling its queryset (visibility, owner
precedence, `select_related`) cost several times the query itself on every request. So the hot
reads build their queryset once per shape with placeholder values (`Slot`s), keep the SQL the
ORM wrote, and on each call put the request's values where the placeholders were. The rule a
statement applies is still the ORM queryset's (e.g. `visible_memories`): nothing is written out
a second time by hand, and rows become model instances the way Django's own iterable makes them
(same columns, converters, `select_related` populators).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.base import DEFERRED
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]
from django.db.models.sql import InsertQuery

from accounts.models import Agent, Tenant
from accounts.principal import Principal
from memoryhub.pipeline import when_answered


class Slot:
    """Placeholder values, one per name, that no request sends: negative ids and scores, a
    timestamp in year 1, text with a NUL (refused by every input path). A compiled statement
    is checked to carry each exactly where the ORM put the value."""

    _INT_BASE = -7_340_000_000_000

    def __init__(self) -> None:
        self._names: dict[Any, str] = {}

    def int(self, name: str) -> int:
        return self._add(self._INT_BASE - len(self._names), name)

    def text(self, name: str) -> str:
        return self._add(f"\x00slot:{name}", name)

    def time(self, name: str) -> datetime:
        return self._add(datetime(1, 1, 1, 0, 0, len(self._names), tzinfo=UTC), name)

    def _add(self, value, name: str):
        self._names[value] = name
        return value

    def float(self, name: str) -> float:
        # Not a whole number: never equal (so never confused) with an `int` slot.
        return self._add(self._INT_BASE - len(self._names) - 0.5, name)

    @property
    def names(self) -> Mapping[Any, str]:
        return self._names


def slot_principal(slots: Slot, *, shared: int) -> Principal:
    """A principal made of slots: its tenant's and agent's ids (`tenant`, `agent`) and the ids
    of the `shared` agents it reads from (`shared0`, …); `principal_values` binds them."""
    agent = Agent(pk=slots.int("agent"))
    agent._reads_from_ids = [slots.int(f"shared{i}") for i in range(shared)]
    return Principal(tenant=Tenant(pk=slots.int("tenant")), agent=agent)


def principal_values(principal: Principal, shared: list[int]) -> dict[str, Any]:
    """The values of `slot_principal`'s slots for this principal (`shared`: the ids of the
    agents it reads from, as the statement was compiled for)."""
    return {
        "tenant": principal.tenant.pk,
        "agent": principal.agent.pk,
        **{f"shared{i}": pk for i, pk in enumerate(shared)},
    }


def _slot_name(value: Any, names: Mapping[Any, str]) -> str | None:
    return names.get(value) if isinstance(value, Hashable) else None


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float) and math.isfinite(value):
        # A space before a minus, as psycopg writes it: `x -%s` must not become a comment.
        text = repr(int(value) if isinstance(value, int) else float(value))
        return f" {text}" if text.startswith("-") else text
    if isinstance(value, str) and "\x00" not in value:
        # `%%`: the statement still goes through the driver's placeholder formatting.
        return "'" + value.replace("'", "''").replace("%", "%%") + "'"
    raise TypeError(f"not a constant to write into SQL: {value!r}")


_END = object()  # the end of the parameters


def inline_constants(sql: str, params: list | tuple, slots: Slot) -> tuple[str, list]:
    """`sql` with every parameter that is not a slot written in as a literal, and the slots'
    values left as parameters.

    The parameters that are not slots are the shape's own constants (statuses, categories,
    limits: the code's values, never a request's). Written in, they let one generic plan serve
    every execution of a prepared statement: PostgreSQL proves a partial index's predicate
    (`status = 'active'`) and costs a `LIMIT 10` only from literals, so with those as
    parameters it re-plans each time (a custom plan) or plans without the indexes.
    """
    return written_in(sql, params, lambda value: _slot_name(value, slots.names) is None)


def written_in(sql: str, params: list | tuple, inline: Callable[[Any], bool]) -> tuple[str, list]:
    """`sql` with the parameters `inline` picks written in as literals, the others kept."""
    out: list[str] = []
    kept: list = []
    values = iter(params)
    position = 0
    for match in re.finditer(r"%[s%]", sql):
        out.append(sql[position : match.start()])
        position = match.end()
        if match.group() == "%%":
            out.append("%%")
            continue
        value = next(values, _END)
        if value is _END:
            raise ValueError("more placeholders than parameters")
        if inline(value):
            out.append(_literal(value))
        else:
            out.append("%s")
            kept.append(value)
    out.append(sql[position:])
    if next(values, _END) is not _END:
        raise ValueError("more parameters than placeholders")
    return "".join(out), kept


class CompiledSQL:
    """A statement written once with `slots`' values among its `params`; `bind(**values)` gives
    it again with each slot's name bound to a request's value. With `inline`, the other
    parameters (the shape's constants) are written into the SQL (`inline_constants`): only for
    statements whose best plan does not depend on the request's values."""

    def __init__(
        self,
        sql: str,
        params: list | tuple,
        slots: Slot,
        *,
        optional: frozenset[str] = frozenset(),
        inline: bool = False,
    ):
        if inline:
            sql, params = inline_constants(sql, params, slots)
        self.sql, self.params = sql, list(params)
        self.positions = [
            (index, name)
            for index, value in enumerate(self.params)
            if (name := _slot_name(value, slots.names)) is not None
        ]
        # `optional`: slots of the shape that this statement may not use.
        missing = set(slots.names.values()) - optional - {name for _, name in self.positions}
        if missing:  # a value changed on its way to SQL: it cannot be bound again
            raise ValueError(f"placeholders not found in the compiled statement: {missing}")

    def bind(self, **values: Any) -> tuple[str, list]:
        params = list(self.params)
        for index, name in self.positions:
            params[index] = values[name]
        return self.sql, params


def converted(fetched, converters, connection) -> list:
    """A fetched row with each column's converters applied (`compiler.get_converters`'s
    items), as the ORM's iterables apply them."""
    row = list(fetched)
    for position, (convs, expression) in converters:
        value = row[position]
        for converter in convs:
            value = converter(value, expression, connection)
        row[position] = value
    return row


class Instances:
    """Model instances from the values of `names` (in the model's field order, as a SELECT of
    the ORM lists them), as `Model.from_db` makes them: the fields not named deferred. It
    placed each value by looking every field up in the list of names, for every row."""

    def __init__(self, model: type[Model], names: list[str]):
        fields = model._meta.concrete_fields
        position = {field.attname: index for index, field in enumerate(fields)}
        self.model = model
        self.positions = [position[name] for name in names]
        if self.positions != sorted(self.positions):
            raise ValueError(f"{model.__name__}'s fields out of order: {names}")
        self.full = len(names) == len(fields)
        self.template = [DEFERRED] * len(fields)

    def make(self, db: str, values: list) -> Model:
        if self.full:
            args = values
        else:
            args = self.template.copy()
            for index, value in zip(self.positions, values, strict=True):
                args[index] = value
        obj = self.model(*args)
        obj._state.adding = False
        obj._state.db = db
        return obj


class RowLoader:
    """Rows of a hand-written SELECT of `fields` of `model` (in that order), then extra
    columns, as model instances: what `Model.objects.raw()` makes of them (the fields loaded
    with their converters, each extra column an attribute named in `extra`), without the raw
    queryset's per-call work of matching columns to fields."""

    def __init__(self, model: type[Model], fields: list, extra: list[str], db: str = "default"):
        self.model, self.db, self.extra = model, db, extra
        self.names = [field.attname for field in fields]
        self.instances = Instances(model, self.names)
        compiler = model._default_manager.none().query.get_compiler(using=db)
        columns = [field.get_col(model._meta.db_table) for field in fields]
        self.converters = list(compiler.get_converters(columns).items())

    def load(self, rows: list) -> list[Model]:
        connection = connections[self.db]
        count = len(self.names)
        out = []
        for fetched in rows:
            obj = self.instances.make(
                self.db, converted(fetched[:count], self.converters, connection)
            )
            for name, value in zip(self.extra, fetched[count:], strict=True):
                setattr(obj, name, value)
            out.append(obj)
        return out


class CompiledQuery(CompiledSQL):
    """`queryset` (built with `slots`' values) compiled once; `fetch(**values)` runs it with
    each slot's name bound to a value and returns model instances as iterating it would."""

    def __init__(self, queryset: QuerySet, slots: Slot, *, inline: bool = False):
        self.db = queryset.db
        compiler = queryset.query.get_compiler(using=self.db)
        sql, params = compiler.as_sql()
        super().__init__(sql, params, slots, inline=inline)
        select, klass_info = compiler.select, compiler.klass_info
        self.col_count = compiler.col_count
        self.converters = list(compiler.get_converters([s[0] for s in select]).items())
        self.model = klass_info["model"]
        fields = klass_info["select_fields"]
        self.start, self.end = fields[0], fields[-1] + 1
        self.instances = Instances(
            self.model, [s[0].target.attname for s in select[self.start : self.end]]
        )
        self.related_populators = get_related_populators(klass_info, select, self.db)

    def fetch(self, **values: Any) -> list[Model]:
        connection = connections[self.db]
        with connection.cursor() as cursor:
            cursor.execute(*self.bind(**values))
            rows = cursor.fetchall()
        out = []
        for fetched in rows:
            row = converted(fetched[: self.col_count], self.converters, connection)
            obj = self.instances.make(self.db, row[self.start : self.end])
            for populator in self.related_populators:
                populator.populate(row, obj)
            out.append(obj)
        return out


class _InsertStatement:
    """One model's single-row INSERT, written by the ORM's insert compiler once per process."""

    def __init__(self, obj: Model, db: str):
        meta = type(obj)._meta
        fields = [field for field in meta.local_concrete_fields if not field.generated]
        self.auto = meta.auto_field if meta.auto_field and obj.pk is None else None
        self.fields = [field for field in fields if field is not self.auto]
        query = InsertQuery(type(obj))
        query.insert_values(self.fields, [obj])
        compiler = query.get_compiler(using=db)
        compiler.returning_fields = [self.auto] if self.auto else None
        compiler.returning_params = ()
        [(self.sql, _)] = compiler.as_sql()


_INSERTS: dict[tuple[type[Model], bool, str], _InsertStatement] = {}


def _prepared(obj: Model, using: str) -> tuple[_InsertStatement, list] | None:
    """`obj`'s INSERT statement (compiled once per model) and its parameters; None when a value
    is an expression (a database default, F()), which the ORM's own save writes into the SQL."""
    key = (type(obj), obj.pk is None, using)
    statement = _INSERTS.get(key) or _InsertStatement(obj, using)
    values = [field.pre_save(obj, True) for field in statement.fields]
    if any(hasattr(value, "resolve_expression") for value in values):
        return None
    _INSERTS[key] = statement
    connection = connections[using]
    params = [
        field.get_db_prep_save(value, connection=connection)
        for field, value in zip(statement.fields, values, strict=True)
    ]
    return statement, params


def insert_sql(obj: Model, *, using: str = "default") -> tuple[str, list] | None:
    """The INSERT `insert_instance` runs for `obj` (its SQL, its parameters), for a statement
    that writes it along with another (`insert_instance(along=)`; `inserted(obj)` once it ran);
    None when the ORM's own save must write it (`_prepared`)."""
    prepared = _prepared(obj, using)
    return None if prepared is None else (prepared[0].sql, prepared[1])


def inserted(obj: Model, *, using: str = "default") -> None:
    """`obj` is a row of the database now (what `save` marks)."""
    obj._state.adding = False
    obj._state.db = using


def insert_instance(
    obj: Model, *, using: str = "default", along: Sequence[tuple[str, list]] = ()
) -> None:
    """`obj.save(force_insert=True)` for a model without save signals or a parent, in one
    INSERT whose SQL the ORM wrote once per model: the values prepared per field as the ORM
    prepares them, and only an auto primary key read back. The ORM's save compiled the
    statement again on every call and read back the columns the database fills (a generated
    `tsvector`, columns with a database default that the instance already holds).

    `along`: data-modifying statements (INSERTs, with their parameters) written by the same
    round trip, as WITHs of this INSERT (a new memory and its revision's events:
    `revisions.revision_write`)."""
    prepared = _prepared(obj, using)
    connection = connections[using]
    if prepared is None:
        with connection.cursor() as cursor:
            for part in along:
                cursor.execute(*part)
        obj.save(force_insert=True, using=using)
        return
    statement, params = prepared
    sql = statement.sql
    if along:
        parts = ", ".join(f"along{index} AS ({part})" for index, (part, _) in enumerate(along))
        sql = f"WITH {parts} {sql}"
        params = [value for _, part_params in along for value in part_params] + params
    cursor = connection.cursor()
    cursor.execute(sql, params)

    def read() -> None:
        with cursor:
            if statement.auto is not None:
                setattr(obj, statement.auto.attname, cursor.fetchone()[0])

    when_answered(read)  # at once, or at the end of a pipeline (`memoryhub.pipeline`)
    inserted(obj, using=using)

"""`MemoryHubStore`: a LangGraph `BaseStore` backed by MemoryHub (extra `langgraph`).

LangGraph and LangMem keep long-term memory in a store of JSON items, each under a namespace
(a tuple of labels) and a key. This store keeps each item as one MemoryHub memory:

- **key**: `prefix` + every namespace label and then the item key, each percent-encoded
  (`urllib.parse.quote(label, safe="")`) and joined by `/`. `("users", "42", "prefs")` + key
  `"lang"` with the default prefix is the MemoryHub key `langgraph/users/42/prefs/lang`. Each
  part is unambiguous (a `/` inside a label is `%2F`), a namespace is a `key_prefix`, and the
  whole key must fit MemoryHub's 255 characters.
- **subject**: the store's `subject_id` (None: subject-less memories). One store serves one end
  user, or everyone when the user is part of the namespace; MemoryHub's subject rule then keeps
  users apart for hydrate and search too.
- **value**: the memory's `data` is `{"value": <the item's value>}`; its `text` is what
  LangGraph would index (the `index` fields, default every string in the value), so full-text
  and vector search find it; `kind` is `langgraph`, `category` the store's `category` (None:
  the agent's default, `core`, which hydrate loads first).
- **TTL**: `ttl` (minutes) becomes the memory's expiry; MemoryHub hides an expired memory at
  once and prunes it later. With `refresh_on_read` (LangGraph's default) a read pushes the
  expiry forward again (a PATCH, so a version and a revision). The TTL is kept in a tag
  `lg-ttl:<seconds>`; items put with `index=False` carry the tag `lg:noindex` and are left out
  of query searches (they still appear in filter-only searches).
- **delete** forgets (tombstones) the memory; an operator can still restore it from the console.

Filters (`filter={...}`, with `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`) are applied by the
store to the values MemoryHub returns. A search with a `query` ranks with MemoryHub's hybrid
search and considers its best 100 matches; without a query it walks every item of the
namespace prefix, newest `updated_at` first.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Generator, Iterable
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)
from langgraph.store.base.embed import get_text_at_path

import memoryhub_client._core as _core
from memoryhub_client.aio import AsyncMemoryHub
from memoryhub_client.client import MemoryHub
from memoryhub_client.types import Memory, Page, SearchResult, parse_time

__all__ = ["MemoryHubStore"]

T = TypeVar("T")
# Each op handler is a generator: it yields the requests it needs and gets their results back,
# so one handler serves `batch` (sent by MemoryHub) and `abatch` (awaited on AsyncMemoryHub).
Steps = Generator[_core.Call[Any], Any, T]

KIND = "langgraph"
NOINDEX_TAG = "lg:noindex"
TTL_TAG = "lg-ttl:"
MAX_TEXT_CHARS = 16000
SEARCH_WINDOW = 100  # MemoryHub's largest search page


class MemoryHubStore(BaseStore):
    """A LangGraph store on MemoryHub: `MemoryHubStore(client)` or
    `MemoryHubStore(url=…, api_key=…)`. See the module docstring for the mapping.

    `client` may be a `MemoryHub`, an `AsyncMemoryHub` or both (`async_client=`); without an
    async client `abatch` runs `batch` in a worker thread, and without a sync one `batch`
    refuses. `index` is LangGraph's index config (only `fields` is read: which parts of a value
    become the searchable text); `ttl` is LangGraph's TTL config (`default_ttl`,
    `refresh_on_read`).
    """

    supports_ttl: bool = True

    def __init__(
        self,
        client: MemoryHub | AsyncMemoryHub | None = None,
        *,
        url: str | None = None,
        api_key: str | None = None,
        async_client: AsyncMemoryHub | None = None,
        subject_id: str | None = None,
        category: str | None = None,
        prefix: str = "langgraph/",
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
    ) -> None:
        if client is None and async_client is None:
            if not (url and api_key):
                raise TypeError("MemoryHubStore needs a client, or url= and api_key=")
            client, async_client = MemoryHub(url, api_key), AsyncMemoryHub(url, api_key)
        if isinstance(client, AsyncMemoryHub):
            client, async_client = None, client
        self.client: MemoryHub | None = client
        self.async_client = async_client
        self.subject_id = subject_id
        self.category = category
        self.prefix = prefix
        self.index_fields: list[str] = list((index or {}).get("fields") or ["$"])
        self.ttl_config = ttl

    # --- the BaseStore interface -----------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the ops in order (a put is seen by a later get of the same batch)."""
        if self.client is None:
            raise TypeError("This MemoryHubStore has only an async client: use abatch")
        return [self._drive(self._op(op)) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` for asyncio, on the async client when there is one."""
        if self.async_client is None:
            return await asyncio.to_thread(self.batch, list(ops))
        return [await self._adrive(self._op(op)) for op in ops]

    def _drive(self, steps: Steps[T]) -> T:
        assert self.client is not None
        try:
            call = next(steps)
            while True:
                call = steps.send(self.client._send(call))
        except StopIteration as done:
            return done.value

    async def _adrive(self, steps: Steps[T]) -> T:
        assert self.async_client is not None
        try:
            call = next(steps)
            while True:
                call = steps.send(await self.async_client._send(call))
        except StopIteration as done:
            return done.value

    def _op(self, op: Op) -> Steps[Any]:
        validate_op_namespace(op)
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, PutOp):
            return self._put(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, ListNamespacesOp):
            return self._list_namespaces(op)
        raise TypeError(f"Unknown store operation {type(op).__name__}")

    # --- the mapping -----------------------------------------------------------------------

    def memory_key(self, namespace: tuple[str, ...], key: str) -> str:
        """The MemoryHub key of an item."""
        return self.namespace_prefix(namespace) + quote(key, safe="")

    def namespace_prefix(self, namespace: tuple[str, ...]) -> str:
        """The `key_prefix` of every item in `namespace` and below it."""
        return self.prefix + "".join(quote(label, safe="") + "/" for label in namespace)

    def _split(self, memory_key: str | None) -> tuple[tuple[str, ...], str] | None:
        if not memory_key or not memory_key.startswith(self.prefix):
            return None
        *labels, key = memory_key[len(self.prefix) :].split("/")
        if not labels:
            return None
        return tuple(unquote(label) for label in labels), unquote(key)

    def _text(self, value: dict[str, Any], fields: list[str]) -> str:
        if fields == ["$"]:
            texts = list(_strings(value))
        else:
            texts = [text for path in fields for text in get_text_at_path(value, path)]
        return "\n".join(texts)[:MAX_TEXT_CHARS]

    def _item(self, memory: Memory) -> Item | None:
        place = self._split(memory.key)
        if place is None or not isinstance(memory.data, dict) or "value" not in memory.data:
            return None
        namespace, key = place
        return Item(
            value=memory.data["value"],
            key=key,
            namespace=namespace,
            created_at=memory.created_at,  # type: ignore[arg-type]
            updated_at=memory.updated_at,  # type: ignore[arg-type]
        )

    def _refresh(self, memory_id: str, tags: list[str], wanted: bool) -> Steps[None]:
        seconds = next((tag[len(TTL_TAG) :] for tag in tags if tag.startswith(TTL_TAG)), None)
        if wanted and seconds:
            yield _core.update(memory_id, {"ttl": f"{seconds}s"}, self.subject_id, None)

    # --- the operations --------------------------------------------------------------------

    def _get(self, op: GetOp) -> Steps[Item | None]:
        memory = yield _core.recall(self.memory_key(op.namespace, op.key), self.subject_id)
        if memory is None:
            return None
        yield from self._refresh(memory.id, memory.tags, op.refresh_ttl)
        return self._item(memory)

    def _put(self, op: PutOp) -> Steps[None]:
        key = self.memory_key(op.namespace, op.key)
        if op.value is None:
            yield _core.forget(
                None, key, self.subject_id, "deleted through the LangGraph store", False
            )
            return None
        fields: dict[str, Any] = {"key": key, "kind": KIND, "data": {"value": op.value}}
        if self.subject_id is not None:
            fields["subject_id"] = self.subject_id
        if self.category is not None:
            fields["category"] = self.category
        tags = []
        if op.index is False:
            tags.append(NOINDEX_TAG)
            text = ""
        else:
            text = self._text(op.value, list(op.index) if op.index else self.index_fields)
        if op.ttl is None:
            fields["expires_at"] = None  # never, whatever the agent's default TTL
        else:
            seconds = max(1, math.ceil(op.ttl * 60))
            fields["ttl"] = f"{seconds}s"
            tags.append(f"{TTL_TAG}{seconds}")
        fields["tags"] = tags
        yield _core.store(text, fields, None)
        return None

    def _search(self, op: SearchOp) -> Steps[list[SearchItem]]:
        prefix = self.namespace_prefix(op.namespace_prefix)
        found: list[tuple[SearchItem, str, list[str]]] = []
        if op.query:
            window = SEARCH_WINDOW if op.filter else min(op.offset + op.limit, SEARCH_WINDOW)
            search = {"key_prefix": prefix, "limit": max(window, 1)}
            if self.subject_id is not None:
                search["subject_id"] = self.subject_id
            result: SearchResult = yield _core.search(op.query, search, None)
            for hit in result:
                tags = list(hit.context.get("tags") or [])
                place, value = self._split(hit.key), hit.data.get("value")
                if place is None or not isinstance(value, dict) or NOINDEX_TAG in tags:
                    continue
                item = SearchItem(
                    namespace=place[0],
                    key=place[1],
                    value=value,
                    created_at=parse_time(hit.context.get("created_at")),  # type: ignore[arg-type]
                    updated_at=parse_time(hit.context.get("updated_at")),  # type: ignore[arg-type]
                    score=hit.relevance,
                )
                found.append((item, hit.id, tags))
        else:
            cursor: str | None = None
            while True:
                filters = {"key_prefix": prefix, "subject_id": self.subject_id, "limit": 200}
                page: Page = yield _core.list_page(filters, cursor)
                for memory in page.items:
                    item = self._item(memory)
                    if item is not None:
                        found.append((_search_item(item), memory.id, memory.tags))
                if not page.next_cursor:
                    break
                cursor = page.next_cursor
        matching = [entry for entry in found if _matches(entry[0].value, op.filter or {})]
        chosen = matching[op.offset : op.offset + op.limit]
        for _, memory_id, tags in chosen:
            yield from self._refresh(memory_id, tags, op.refresh_ttl)
        return [item for item, _, _ in chosen]

    def _list_namespaces(self, op: ListNamespacesOp) -> Steps[list[tuple[str, ...]]]:
        literal: tuple[str, ...] = ()
        for condition in op.match_conditions or ():
            if condition.match_type == "prefix":
                literal = tuple(_until_wildcard(condition.path))
                break
        keys: list[str] = yield _core.keys(self.subject_id, None, self.namespace_prefix(literal))
        namespaces: set[tuple[str, ...]] = set()
        for key in keys:
            place = self._split(key)
            if place is None:
                continue
            namespace = place[0]
            if all(_namespace_matches(c, namespace) for c in op.match_conditions or ()):
                namespaces.add(namespace[: op.max_depth] if op.max_depth else namespace)
        return sorted(namespaces)[op.offset : op.offset + op.limit]


# --- helpers ---------------------------------------------------------------------------------


def _strings(value: Any) -> Iterable[str]:
    """Every string in a JSON value, depth first: the default searchable text of an item."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def _search_item(item: Item) -> SearchItem:
    return SearchItem(item.namespace, item.key, item.value, item.created_at, item.updated_at)


def _until_wildcard(path: Iterable[str]) -> Iterable[str]:
    for label in path:
        if label == "*":
            return
        yield label


def _namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise ValueError(f"Unsupported match type: {condition.match_type}")
    return all(wanted in ("*", label) for label, wanted in pairs)


_OPERATORS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: float(a) > float(b),
    "$gte": lambda a, b: float(a) >= float(b),
    "$lt": lambda a, b: float(a) < float(b),
    "$lte": lambda a, b: float(a) <= float(b),
}


def _matches(value: Any, wanted: Any) -> bool:
    """LangGraph's filter semantics (those of its in-memory and Postgres stores): nested
    objects match field by field, `$`-operators compare, anything else must be equal: a falsy
    wanted value (`False`, `0`, `""`, `None`) is a value to match like any other."""
    if isinstance(wanted, dict):
        if any(name.startswith("$") for name in wanted):
            try:
                return value is not None and all(
                    _OPERATORS[name](value, operand) for name, operand in wanted.items()
                )
            except (KeyError, TypeError, ValueError):
                return False
        return isinstance(value, dict) and all(
            _matches(value.get(name), inner) for name, inner in wanted.items()
        )
    return value == wanted

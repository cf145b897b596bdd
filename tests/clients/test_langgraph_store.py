"""`MemoryHubStore` held to the behaviour LangGraph's own stores are tested for (ported from
langgraph's libs/checkpoint/tests/test_store.py: put/get/delete, namespace rules,
list_namespaces with prefix/suffix/wildcards/max_depth/limit/offset, search with query and
filters, pagination, batch order, TTL), sync and async, against a live MemoryHub."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from langgraph.store.base import GetOp, InvalidNamespaceError, ListNamespacesOp, PutOp, SearchOp
from memoryhub_client import AsyncMemoryHub, MemoryHub
from memoryhub_client.langgraph import MemoryHubStore

from memories.models import Memory
from memories.models import Status as MemoryStatus


class SyncFacade:
    """The async half of the store behind the sync names, so each case runs both ways."""

    def __init__(self, store: MemoryHubStore) -> None:
        self.store, self._loop = store, asyncio.new_event_loop()

    def _run(self, coro):
        return self._loop.run_until_complete(coro)

    def put(self, *args, **kwargs):
        return self._run(self.store.aput(*args, **kwargs))

    def get(self, *args, **kwargs):
        return self._run(self.store.aget(*args, **kwargs))

    def delete(self, *args, **kwargs):
        return self._run(self.store.adelete(*args, **kwargs))

    def search(self, *args, **kwargs):
        return self._run(self.store.asearch(*args, **kwargs))

    def list_namespaces(self, **kwargs):
        return self._run(self.store.alist_namespaces(**kwargs))

    def batch(self, ops):
        return self._run(self.store.abatch(ops))

    def close(self):
        self._run(self.store.async_client.aclose())
        self._loop.close()


@pytest.fixture
def make_store(live):
    made = []

    def build(**kwargs):
        store = MemoryHubStore(
            MemoryHub(live.url, live.key),
            async_client=AsyncMemoryHub(live.url, live.key),
            **kwargs,
        )
        made.append(store)
        return store

    yield build
    for store in made:
        store.client.close()


@pytest.fixture(params=["sync", "async"])
def store(request, make_store):
    store = make_store()
    if request.param == "sync":
        yield store
        return
    facade = SyncFacade(store)
    yield facade
    facade.close()


def test_put_get_update_delete(store):
    store.put(("users", "42"), "prefs", {"lang": "fr", "tz": "Europe/Paris"})
    item = store.get(("users", "42"), "prefs")
    assert (item.namespace, item.key, item.value) == (
        ("users", "42"),
        "prefs",
        {"lang": "fr", "tz": "Europe/Paris"},
    )
    assert item.created_at.tzinfo is not None and item.updated_at >= item.created_at
    store.put(("users", "42"), "prefs", {"lang": "de"})
    assert store.get(("users", "42"), "prefs").value == {"lang": "de"}
    assert store.get(("users", "43"), "prefs") is None
    assert store.get(("users",), "prefs") is None  # another namespace, not a prefix
    store.delete(("users", "42"), "prefs")
    assert store.get(("users", "42"), "prefs") is None
    store.delete(("users", "42"), "prefs")  # deleting twice is fine


def test_the_mapping_onto_memoryhub_keys_is_the_documented_one(make_store, live):
    store = make_store(subject_id="u-42")
    store.put(("users", "a/b", "ünï"), "k 1", {"text": "hello"})
    memory = Memory.objects.get(status=MemoryStatus.ACTIVE)
    assert memory.key == "langgraph/users/a%2Fb/%C3%BCn%C3%AF/k%201"
    assert (memory.subject_id, memory.kind, memory.text) == ("u-42", "langgraph", "hello")
    assert memory.data == {"value": {"text": "hello"}}
    assert store.get(("users", "a/b", "ünï"), "k 1").value == {"text": "hello"}
    # Another subject's store does not see it.
    assert make_store(subject_id="u-7").get(("users", "a/b", "ünï"), "k 1") is None


def test_namespace_rules(store):
    doc = {"foo": "bar"}
    for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "foo", doc)
    store.put(("foo", "langgraph", "foo"), "bar", doc)
    assert store.get(("foo", "langgraph", "foo"), "bar").value == doc
    assert store.search(("foo", "langgraph", "foo"))[0].value == doc
    # Past the public put: a "langgraph" root is allowed through batch, as in LangGraph.
    store.batch([PutOp(("langgraph", "foo"), "bar", doc)])
    assert store.get(("langgraph", "foo"), "bar").value == doc
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "bar", doc)])


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


def test_list_namespaces(store):
    for i, ns in enumerate(NAMESPACES):
        store.put(ns, f"id_{i}", {"data": f"value_{i:02d}"})
    ab = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(prefix=("a", "b")) == ab
    assert store.list_namespaces(suffix=("f",)) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(prefix=("a", "b"), limit=2) == ab[:2]
    assert store.list_namespaces(prefix=("a", "b"), offset=2) == ab[2:]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(suffix=("*", "f")) == [
        ("a", "b", "f"),
        ("a", "c", "f"),
        ("b", "a", "f"),
    ]
    assert store.list_namespaces(prefix=("nonexistent",)) == []
    assert store.list_namespaces(prefix=("users", "123")) == [("users", "123")]
    assert store.list_namespaces(prefix=("users", "*")) == [
        ("users", "123"),
        ("users", "456", "settings"),
    ]
    assert store.list_namespaces(prefix=("*", "users"), suffix=("*", "settings")) == []
    assert store.list_namespaces(max_depth=2) == sorted(
        {("a", "b"), ("a", "c"), ("b", "a"), ("users", "123"), ("users", "456"), ("admin", "users")}
    )
    assert store.list_namespaces() == sorted(NAMESPACES)


def test_list_namespaces_pagination_and_empty(store):
    assert store.list_namespaces() == []
    for i in range(20):
        store.put(("namespace", f"sub_{i:02d}"), f"id_{i:02d}", {"data": i})
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=5) == [
        ("namespace", f"sub_{i:02d}") for i in range(5, 10)
    ]
    assert store.list_namespaces(prefix=("namespace",), limit=5, offset=15) == [
        ("namespace", f"sub_{i:02d}") for i in range(15, 20)
    ]


DOCS = [
    ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
    ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
    ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
    ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
]


def test_search_with_query_and_filters(store):
    for key, value in DOCS:
        store.put(("test",), key, value)
    store.put(("other",), "doc5", {"text": "red apple", "color": "red", "score": 5})
    results = store.search(("test",), query="apple", filter={"color": "red"})
    assert [r.key for r in results] == ["doc1", "doc2"]
    assert results[0].score > results[1].score and results[0].namespace == ("test",)
    results = store.search(("test",), query="car", filter={"color": "red"})
    assert [r.key for r in results] == ["doc2", "doc1"]
    results = store.search(("test",), query="blue car", filter={"score": {"$gt": 3.2}})
    assert results[0].key == "doc4" and {r.key for r in results} == {"doc1", "doc3", "doc4"}
    results = store.search(
        ("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"}
    )
    assert [r.key for r in results] == ["doc3"]
    results = store.search(("test",), filter={"score": {"$lt": 3.5}})
    assert [r.key for r in results] == ["doc2"]
    assert {r.key for r in store.search(("test",), filter={"color": {"$ne": "red"}})} == {
        "doc3",
        "doc4",
    }
    assert {r.key for r in store.search((), query="red apple")} >= {"doc1", "doc5"}


def test_a_falsy_filter_value_is_matched_not_ignored(store):
    """`filter={"active": False}` (or `0`, `""`, `None`) selects the items holding that value, as
    LangGraph's own stores do; it is not "no filter"."""
    store.put(("f",), "on", {"active": True, "count": 1, "note": "x", "meta": {"ok": True}})
    store.put(("f",), "off", {"active": False, "count": 0, "note": "", "meta": {"ok": False}})
    store.put(("f",), "bare", {"active": None, "count": 2, "note": "y", "meta": {}})
    for wanted, keys in [
        ({"active": False}, {"off"}),
        ({"active": True}, {"on"}),
        ({"count": 0}, {"off"}),
        ({"note": ""}, {"off"}),
        ({"active": None}, {"bare"}),
        ({"meta": {"ok": False}}, {"off"}),
        ({"count": {"$eq": 0}}, {"off"}),
        ({}, {"on", "off", "bare"}),
    ]:
        assert {r.key for r in store.search(("f",), filter=wanted)} == keys, wanted


def test_search_pagination_and_edge_cases(store):
    for i in range(5):
        store.put(("test",), f"doc{i}", {"text": f"test document number {i}"})
    page1 = store.search(("test",), query="test", limit=2)
    page2 = store.search(("test",), query="test", limit=2, offset=2)
    assert len(page1) == len(page2) == 2
    assert not {r.key for r in page1} & {r.key for r in page2}
    assert len(store.search(("test",), query="test", limit=10)) == 5
    assert len(store.search(("test",), limit=3)) == 3
    assert [r.key for r in store.search(("test",), offset=3)] == ["doc1", "doc0"]  # newest first
    for query in ["", None, "test " * 100, "test!@#$%^&*()"]:
        assert len(store.search(("test",), query=query)) == 5, query


def test_update_changes_what_search_finds_and_index_false(store):
    def score(query: str, key: str) -> float:
        found = store.search(("test",), query=query)
        return next((r.score for r in found if r.key == key), 0.0)

    store.put(("test",), "doc1", {"text": "zany zebra Xerxes"})
    store.put(("test",), "doc2", {"text": "something about dogs"})
    store.put(("test",), "doc3", {"text": "text about birds"})
    assert store.search(("test",), query="Zany Xerxes")[0].key == "doc1"
    initial = score("Zany Xerxes", "doc1")
    store.put(("test",), "doc1", {"text": "new text about dogs"})
    after = score("Zany Xerxes", "doc1")
    assert after < initial
    assert score("new text about dogs", "doc1") > after
    store.put(("test",), "doc4", {"text": "new text about dogs"}, index=False)
    found = store.search(("test",), query="new text about dogs")
    assert "doc1" in [r.key for r in found] and "doc4" not in [r.key for r in found]
    assert "doc4" in [r.key for r in store.search(("test",))]  # filter-only search lists it


def test_index_fields_choose_the_searchable_text(make_store):
    store = make_store(index={"dims": 1, "embed": None, "fields": ["title"]})
    store.put(("docs",), "a", {"title": "quarterly report", "body": "penguins"})
    assert Memory.objects.get().text == "quarterly report"  # the body is not indexed
    assert [r.key for r in store.search(("docs",), query="quarterly")] == ["a"]
    store.put(("docs",), "b", {"title": "x", "body": "penguins"}, index=["body"])
    assert Memory.objects.get(key__endswith="/b").text == "penguins"
    assert next(r.key for r in store.search(("docs",), query="penguins")) == "b"


def test_batch_runs_every_op_in_order(store):
    results = store.batch(
        [
            PutOp(("test", "foo"), "key1", {"data": "value1"}),
            PutOp(("test", "bar"), "key2", {"data": "value2"}),
            GetOp(("test", "foo"), "key1"),
            SearchOp(("test",), filter={"data": "value2"}),
            ListNamespacesOp(match_conditions=None, max_depth=None, limit=10, offset=0),
            PutOp(("test", "foo"), "key1", None),
            GetOp(("test", "foo"), "key1"),
        ]
    )
    assert results[:2] == [None, None]
    assert results[2].value == {"data": "value1"}
    assert [r.key for r in results[3]] == ["key2"]
    assert results[4] == [("test", "bar"), ("test", "foo")]
    assert results[5:] == [None, None]


def test_concurrent_async_ops(make_store):
    store = make_store()

    async def scenario():
        docs = [(f"doc{i}", {"color": ["red", "blue"][i % 2], "index": i}) for i in range(20)]
        await asyncio.gather(*[store.aput(("test",), k, v) for k, v in docs])
        got, blues = await asyncio.gather(
            store.aget(("test",), "doc3"),
            store.asearch(("test",), filter={"color": "blue"}, limit=50),
        )
        await store.async_client.aclose()
        return got, blues

    got, blues = asyncio.run(scenario())
    assert got.value == {"color": "blue", "index": 3}
    assert sorted(r.value["index"] for r in blues) == list(range(1, 20, 2))


def test_ttl_sets_and_refreshes_expiry(make_store, live):
    store = make_store(ttl={"default_ttl": 10, "refresh_on_read": True})
    before = datetime.now(UTC)
    store.put(("t",), "default", {"v": 1})
    store.put(("t",), "short", {"v": 2}, ttl=1)
    store.put(("t",), "forever", {"v": 3}, ttl=None)
    rows = {m.key.rsplit("/", 1)[1]: m for m in Memory.objects.all()}
    assert timedelta(minutes=9) < rows["default"].expires_at - before <= timedelta(minutes=11)
    assert timedelta(seconds=50) < rows["short"].expires_at - before <= timedelta(seconds=70)
    assert rows["forever"].expires_at is None

    assert store.get(("t",), "short", refresh_ttl=False).value == {"v": 2}
    assert Memory.objects.get(pk=rows["short"].pk).version == 1
    assert store.get(("t",), "short").value == {"v": 2}  # refresh_on_read: the expiry moves
    refreshed = Memory.objects.get(pk=rows["short"].pk)
    assert refreshed.version == 2 and refreshed.expires_at > rows["short"].expires_at

    Memory.objects.filter(pk=rows["default"].pk).update(expires_at=before - timedelta(seconds=1))
    assert store.get(("t",), "default") is None  # expired: gone at once
    # Newest `updated_at` first: the refresh was the last write.
    assert [r.key for r in store.search(("t",), refresh_ttl=False)] == ["short", "forever"]

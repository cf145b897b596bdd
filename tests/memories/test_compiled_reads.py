"""Get and recall run compiled-once statements: they answer exactly what their querysets do."""

from __future__ import annotations

import json

import pytest

from accounts.principal import Principal
from memories import selectors
from memories.clock import resolve_now
from memories.compiled import CompiledQuery, Slot, principal_values
from memories.models import VECTOR_FIELDS, Memory
from memories.serialization import memory_json
from memories.services.store import memory_store
from memories.visibility import reads_from_ids, visible_memories
from memoryhub.errors import NotFound
from tests.factories import make_agent


def _fields(memory: Memory) -> dict:
    values = {k: v for k, v in memory.__dict__.items() if k != "_state"}
    values["owner"] = memory.agent.slug if memory.agent_id else None
    return values


@pytest.fixture
def crowd(tenant, other_tenant, agent):
    """The agent reads from `friend`; each owner stores the same keys, plain and per subject,
    plus workspace, conversation, expired and forgotten ones."""
    friend, stranger = make_agent(tenant, "friend-bot"), make_agent(tenant, "stranger-bot")
    outsider = make_agent(other_tenant, "support-bot")
    agent.reads_from.set([friend])
    agent._reads_from_ids = None
    for owner in (agent, friend, stranger, outsider):
        me = Principal(tenant=owner.tenant, agent=owner)
        for body in (
            {"text": f"{owner.slug} plain", "key": "k.plain"},
            {"text": f"{owner.slug} about ann", "key": "k.plain", "subject_id": "ann"},
            {"text": f"{owner.slug} about bob", "key": "k.bob", "subject_id": "bob"},
            {"text": f"{owner.slug} team", "key": f"k.team.{owner.slug}", "category": "workspace"},
            {
                "text": f"{owner.slug} run",
                "key": "k.run",
                "category": "conversation",
                "thread_id": "t1",
            },
            {"text": f"{owner.slug} gone", "key": "k.gone", "ttl": "1s"},
            {"text": f"{owner.slug} shared only", "key": f"k.only.{owner.slug}"},
        ):
            memory_store(principal=me, data={**body, "dedup_policy": "insert"})
    Memory.objects.filter(text__endswith="gone").update(expires_at="2000-01-01T00:00:00Z")
    Memory.objects.filter(text=f"{friend.slug} shared only").update(status="tombstoned")
    return {"friend": friend, "stranger": stranger, "outsider": outsider}


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann", "bob"])
@pytest.mark.parametrize("viewer", ["agent", "friend"])
def test_get_finds_exactly_the_visible_memories(tenant, agent, crowd, subject_id, viewer):
    who = agent if viewer == "agent" else crowd["friend"]
    principal = Principal(tenant=tenant, agent=who)
    visible = visible_memories(tenant=tenant, agent=who, subject_id=subject_id)
    expected = {m.pk: m for m in visible.select_related("agent").defer(*VECTOR_FIELDS)}
    assert expected
    for memory in Memory.objects.all():  # every tenant's, every status
        if memory.pk in expected:
            got = selectors.memory_get(
                principal=principal, memory_id=memory.pk, subject_id=subject_id
            )
            assert _fields(got) == _fields(expected[memory.pk])
        else:
            with pytest.raises(NotFound):
                selectors.memory_get(
                    principal=principal, memory_id=memory.pk, subject_id=subject_id
                )


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann", "bob"])
@pytest.mark.parametrize("viewer", ["agent", "friend", "stranger"])
def test_recall_answers_what_its_queryset_answers(tenant, agent, crowd, subject_id, viewer):
    who = agent if viewer == "agent" else crowd[viewer]
    principal = Principal(tenant=tenant, agent=who)
    keys = set(Memory.objects.exclude(key=None).values_list("key", flat=True))
    found = 0
    for key in sorted(keys):
        queryset = selectors._by_key(
            tenant=tenant, agent=who, subject=subject_id, now=resolve_now(None), target=key
        )
        expected = queryset.first()
        got = selectors.memory_recall(principal=principal, key=key, subject_id=subject_id)
        assert (got and _fields(got)) == (expected and _fields(expected)), key
        found += got is not None
    assert found >= 3
    # the agent's own plain memory wins over the friend's and the workspace's
    plain = selectors.memory_recall(principal=principal, key="k.plain", subject_id=subject_id)
    assert plain.agent_id == who.pk
    assert plain.subject_id == ("ann" if subject_id == "ann" else None)


@pytest.mark.django_db
def test_shapes_are_compiled_apart(tenant, agent, crowd):
    """A principal reading from one agent and one reading from none use different statements."""
    assert reads_from_ids(agent) == [crowd["friend"].pk]
    mine = Principal(tenant=tenant, agent=agent)
    lonely = Principal(tenant=tenant, agent=crowd["stranger"])
    only = f"k.only.{crowd['stranger'].slug}"
    assert selectors.memory_recall(principal=lonely, key=only).agent_id == crowd["stranger"].pk
    assert selectors.memory_recall(principal=mine, key=only) is None  # not shared with it
    friend_team = f"k.team.{crowd['friend'].slug}"
    assert selectors.memory_recall(principal=mine, key=friend_team).agent_id is None


@pytest.mark.django_db
def test_a_value_the_orm_rewrites_cannot_be_a_slot():
    slots = Slot()
    rewritten = Memory.objects.filter(key__startswith=slots.text("prefix"))  # becomes 'x%'
    with pytest.raises(ValueError, match="prefix"):
        CompiledQuery(rewritten, slots)


@pytest.mark.django_db
@pytest.mark.parametrize("subject_id", [None, "ann"])
def test_list_objects_written_by_postgres_are_memory_json(
    tenant, agent, crowd, api_client, subject_id
):
    """`GET /memories` has PostgreSQL write each memory object: the same as `memory_json`
    (own, workspace and shared owners; data, tags, expiry), the order and walk unchanged."""
    memory_store(
        principal=Principal(tenant=tenant, agent=agent),
        data={"text": "With data.", "data": {"zeta": 1.5, "a": [1, None]}, "tags": ["X y"]},
    )
    params = {"limit": 3, **({"subject_id": subject_id} if subject_id else {})}
    walked, cursor = [], None
    while True:
        query = {**params, "cursor": cursor} if cursor else params
        body = api_client.get("/api/v1/memories", query).json()
        walked += body["memories"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    expected = Memory.objects.filter(pk__in=[m["id"] for m in walked]).select_related("agent")
    by_id = {m.pk: memory_json(m, agent=agent) for m in expected}
    assert walked == [by_id[m["id"]] for m in walked]
    visible = visible_memories(tenant=tenant, agent=agent, subject_id=subject_id)
    assert [m["id"] for m in walked] == list(
        visible.order_by("-updated_at", "-id").values_list("id", flat=True)
    )
    assert {m["source"] for m in walked} == {"own", "workspace", "shared:friend-bot"}


LIST_BODIES = [
    {},
    {"limit": 2},
    {"subject_id": "ann", "limit": 3},
    {"include_shared": False},
    {"category": "workspace", "kind": "fact"},
    {"thread_id": "t1", "updated_after": "2020-01-01T00:00:00Z"},
]


@pytest.mark.django_db
@pytest.mark.parametrize("body", LIST_BODIES)
@pytest.mark.parametrize("viewer", ["agent", "stranger"])
def test_compiled_list_statements_are_the_built_ones(tenant, agent, crowd, body, viewer):
    """Each page of a walk (the first, and one after a cursor) runs the statements built for
    that request, exactly, bound into the statements compiled for its shape."""
    owner = agent if viewer == "agent" else crowd["stranger"]
    principal = Principal(tenant=tenant, agent=owner)
    cursor = None
    for _ in range(2):
        filters = {**body, **({"cursor": cursor} if cursor else {})}
        request = selectors._list_request(principal=principal, filters=filters, now=None)
        rows, parts = selectors._list_rows(tenant, owner, request)
        built = [
            (sql, list(params))
            for sql, params in (
                statement.query.sql_with_params()
                for statement in selectors._walk(
                    rows, parts, cursor=request.cursor, limit=request.limit, as_json_for=owner
                )
            )
        ]
        shared = reads_from_ids(owner) if request.include_shared else []
        values = {**principal_values(principal, shared), **request.slot_values()}
        compiled = selectors._compiled_list(request.shape(len(shared)))
        assert [statement.bind(**values) for statement in compiled] == built
        served = selectors._compiled_list.cache_info().hits
        _, cursor, _ = selectors.memory_list_json(principal=principal, filters=filters)
        assert selectors._compiled_list.cache_info().hits == served + 1  # it ran these
        if cursor is None:
            break


@pytest.mark.django_db
def test_a_list_by_tags_or_key_prefix_is_built_each_time(tenant, agent, crowd):
    """The ORM rewrites tags (arrays) and key prefixes (LIKE patterns): not compiled."""
    principal = Principal(tenant=tenant, agent=agent)
    for filters in ({"tag": "x"}, {"key_prefix": "k.team."}):
        request = selectors._list_request(principal=principal, filters=filters, now=None)
        assert request.shape(1) is None
    listed, _, _ = selectors.memory_list_json(
        principal=principal, filters={"key_prefix": "k.team."}
    )
    # Workspace memories are the tenant's: its three agents' ones, not the other tenant's.
    assert sorted(json.loads(row)["key"] for row in listed) == [
        f"k.team.{slug}" for slug in ("friend-bot", "stranger-bot", "support-bot")
    ]
    assert len(listed) == len({json.loads(row)["id"] for row in listed}) == 3

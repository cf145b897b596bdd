"""`memory_json_sql` (PostgreSQL writes the memory object) says exactly what `memory_json` says."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from accounts.principal import Principal
from memories.models import Memory
from memories.serialization import memory_json, memory_json_sql
from memories.services.store import memory_store
from tests.factories import make_agent

T0 = datetime(2026, 3, 1, 12, 0, 0, 120034, tzinfo=UTC)

STORES = [
    {"text": "Plain fact.", "dedup_policy": "insert"},
    {
        "text": 'Zoë\'s "café" — 東京\n\ttab \\ back\u2028slash \x01 control',
        "key": "user.city",
        "category": "core",
        "kind": "UserProfile",
        "data": {"zeta": 1.5, "alpha": [1, "two", None, {"nested": True}], "big": 10**18},
        "tags": ["Travel", "city:tokyo"],
        "subject_id": "ann",
        "importance": 1,
        "confidence": 0.125,
        "capture_mode": "inferred",
        "source_provider": "crm/v2",
        "mentions": [{"name": "Zoë", "type": "person"}],
        "ttl": "7d",
    },
    {"text": "Thread note.", "category": "conversation", "thread_id": "run-1", "importance": 0},
    {"text": "Team fact.", "category": "workspace", "confidence": 0.3},
    {"data": {"only": "data"}, "category": "archival"},
]


@pytest.mark.django_db
def test_sql_object_equals_python_object(tenant, agent):
    me = Principal(tenant=tenant, agent=agent)
    other = make_agent(tenant, "billing-bot")
    mine = [memory_store(principal=me, data=dict(b), now=T0).memory for b in STORES]
    theirs = memory_store(
        principal=Principal(tenant=tenant, agent=other), data={"text": "Shared."}, now=T0
    ).memory
    memories = [*mine, theirs]
    sql = (
        f"SELECT m.id, {memory_json_sql()} FROM memories_memory m "
        "LEFT JOIN accounts_agent o ON o.id = m.agent_id WHERE m.id = ANY(%s)"
    )
    for viewer in (agent, other):
        with connection.cursor() as cursor:
            cursor.execute(sql, [viewer.pk, [m.id for m in memories]])
            built = dict(cursor.fetchall())
        for memory in Memory.objects.filter(pk__in=built).select_related("agent"):
            expected = memory_json(memory, agent=viewer)
            text = built[memory.id]
            parsed = json.loads(text)
            assert list(parsed) == list(expected)  # same keys, same order
            assert parsed == expected
            # same JSON types too (1.0 stays a float, as Python writes it)
            assert {k: type(v) for k, v in parsed.items()} == {
                k: type(v) for k, v in expected.items()
            }
    assert expected["expires_at"] is None or expected["expires_at"].endswith("Z")
    assert T0 + timedelta(days=7) == datetime.fromisoformat(
        memory_json(mine[1], agent=agent)["expires_at"]
    )

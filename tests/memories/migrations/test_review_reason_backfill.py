"""Migration 0061: memories pending before `review_reason` existed get the reason the store
would have recorded for them."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from memories.models import Memory
from tests.factories import make_agent
from tests.support.memories import store

backfill = importlib.import_module("memories.migrations.0061_memory_review_reason_backfill")


@pytest.mark.django_db
def test_pending_memories_get_the_reason_their_store_would_have_recorded(agent):
    reviewing = make_agent(agent.tenant, "careful-bot", extraction="review")
    formed = {"source_provider": "extraction:gpt-4o-mini", "capture_mode": "inferred"}
    rows = {
        "inferred": store(agent, "Seems to like jazz", capture_mode="inferred"),
        "near": store(agent, "Lives in Lisbon"),
        "low": store(agent, "Maybe moving", confidence=0.5, **formed),
        "policy": store(reviewing, "Likes tea", confidence=0.99, **formed),
        "sure": store(agent, "Speaks Portuguese", confidence=0.95, **formed),
        "explicit": store(agent, "Not pending"),
    }
    Memory.objects.all().update(review_state="pending", review_reason="")
    Memory.objects.filter(pk=rows["explicit"].pk).update(review_state="none")
    with connection.cursor() as cursor:
        cursor.execute(backfill.FORWARD)
    reasons = dict(Memory.objects.values_list("id", "review_reason"))
    assert {name: reasons[m.pk] for name, m in rows.items()} == {
        "inferred": "inferred",
        "near": "near_duplicate",
        "low": "low_confidence",  # below the agent's review_below (0.8)
        "policy": "agent_policy",  # its agent reviews every extracted memory
        "sure": "agent_policy",  # pending although sure: only a review policy did that
        "explicit": "",
    }

"""The reason of memories already pending, derived as the store would have recorded it.

Formed from a conversation (`source_provider` `extraction:…`): the agent's policy when its
extraction is `review`, else low confidence (below its `review_below`: the only other way a
formed memory waits). Else an agent's `inferred` store; else a store next to near-duplicates.
"""

from django.db import migrations

FORWARD = """
UPDATE memories_memory AS m
SET review_reason = CASE
    WHEN m.source_provider LIKE 'extraction:%' THEN
        CASE WHEN a.extraction = 'review' OR m.confidence >= a.review_below
             THEN 'agent_policy' ELSE 'low_confidence' END
    WHEN m.capture_mode = 'inferred' THEN 'inferred'
    ELSE 'near_duplicate'
END
FROM memories_memory AS src LEFT JOIN accounts_agent AS a ON a.id = src.agent_id
WHERE src.id = m.id AND m.review_state = 'pending' AND m.review_reason = ''
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0060_memory_review_reason"),
    ]

    operations = [
        migrations.RunSQL(FORWARD, reverse_sql=migrations.RunSQL.noop, elidable=True),
    ]

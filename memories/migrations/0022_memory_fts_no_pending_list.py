"""The full-text indexes take new entries directly, without GIN's pending list.

With `fastupdate` (GIN's default), an insert appends its lexemes to the index's pending list,
and the list is merged into the index only by a vacuum or once it outgrows
`gin_pending_list_limit` (4 MB). Every scan of the index reads the whole list first. Under the
bench's mixed load the list grew to thousands of entries within seconds, and every keyword
search read them: turned off, the ranking statement, PostgreSQL's CPU per request and the
load's throughput all improved, while an insert cost no more (docs/performance.md#code-figures).

`ALTER INDEX ... SET (fastupdate = off)` keeps the indexes (no rebuild); the entries already
pending are merged once (`gin_clean_pending_list`). The state is what `GinIndex(fastupdate=
False)` describes, as `makemigrations` would have written it by dropping and rebuilding them.
"""

import django.contrib.postgres.indexes
from django.db import migrations, models

INDEXES = ("memory_fts_owner_idx", "memory_fts_workspace_idx")

FORWARD = [
    sql
    for name in INDEXES
    for sql in (
        f"ALTER INDEX {name} SET (fastupdate = off)",
        f"SELECT gin_clean_pending_list('{name}'::regclass)",
    )
]
BACKWARD = [f"ALTER INDEX {name} RESET (fastupdate)" for name in INDEXES]


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0021_memory_fts_per_owner"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, BACKWARD)],
            state_operations=[
                migrations.RemoveIndex(model_name="memory", name="memory_fts_owner_idx"),
                migrations.RemoveIndex(model_name="memory", name="memory_fts_workspace_idx"),
                migrations.AddIndex(
                    model_name="memory",
                    index=django.contrib.postgres.indexes.GinIndex(
                        fastupdate=False,
                        fields=["agent", "search_vector"],
                        name="memory_fts_owner_idx",
                    ),
                ),
                migrations.AddIndex(
                    model_name="memory",
                    index=django.contrib.postgres.indexes.GinIndex(
                        condition=models.Q(("agent__isnull", True), ("status", "active")),
                        fastupdate=False,
                        fields=["tenant", "search_vector"],
                        name="memory_fts_workspace_idx",
                    ),
                ),
            ],
        ),
    ]

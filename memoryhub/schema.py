"""Whether the database's schema is the one this code expects: what `serve` checks before it
starts (docs/operations.md#upgrading)."""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def unapplied_migrations(using: str = DEFAULT_DB_ALIAS) -> list[str]:
    """The migrations `migrate` would apply (`app.name`), and each baseline whose replaced
    migrations the database applied only in part.

    Such a database was migrated by a version from before the baseline, but not to its end: the
    migrations it lacks are gone from the code, and Django would take it for up to date."""
    executor = MigrationExecutor(connections[using])
    loader = executor.loader
    plan = executor.migration_plan(loader.graph.leaf_nodes())
    pending = [f"{migration.app_label}.{migration.name}" for migration, _ in plan]
    for (app, name), migration in sorted(loader.replacements.items()):
        missing = [
            old for _, old in migration.replaces if (app, old) not in loader.applied_migrations
        ]
        if 0 < len(missing) < len(migration.replaces):
            pending.append(
                f"{app}.{name} (applied in part, missing {', '.join(missing)}: migrate first "
                "with the version that has them)"
            )
    return pending

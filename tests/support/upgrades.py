"""Upgrade tests: a throwaway database migrated to a named state (a release's), filled through
that state's historical models, then migrated to head (docs/operations.md#upgrading).

    with upgrade_database(django_db_blocker):
        upgrade = Upgrade()
        apps = upgrade.migrate_to(BASELINE)
        ...  # rows through apps.get_model(...), as the code of that release wrote them
        upgrade.migrate_to_head()
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.contrib.contenttypes.models import ContentType
from django.core.cache import cache
from django.db import connections
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.state import StateApps

# The first release's schema: where every upgrade test starts today.
BASELINE = [("accounts", "0001_baseline"), ("memories", "0001_baseline")]


def _forget_cached_rows() -> None:
    """Caches that hold rows (ids) of the database this process used before the switch."""
    cache.clear()
    ContentType.objects.clear_cache()


@contextmanager
def upgrade_database(django_db_blocker, suffix: str = "upgrade") -> Iterator[None]:
    """An empty database of its own on the test run's server (the test database's name and
    `_<suffix>`), made this process's `default` connection for the block (migrated by nothing
    yet), then dropped."""
    connection = connections["default"]
    saved = dict(connection.settings_dict)
    name = f"{saved['NAME']}_{suffix}"
    server = {
        "host": saved["HOST"] or None,
        "port": saved["PORT"] or None,
        "user": saved["USER"],
        "password": saved["PASSWORD"] or None,
        "dbname": "postgres",
        "autocommit": True,
    }
    with django_db_blocker.unblock():
        connection.ensure_connection()  # the embedded server, started if it is not yet
        with psycopg.connect(**server) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{name}"')
        connection.close()
        connection.settings_dict["NAME"] = name
        _forget_cached_rows()
        try:
            yield
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)
            _forget_cached_rows()
            with psycopg.connect(**server) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Upgrade:
    """The migration executor on the `default` connection."""

    def __init__(self) -> None:
        self.executor = MigrationExecutor(connections["default"])

    def _targets(self, named: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """`named`, and every other app at its latest migration."""
        apps = {app for app, _ in named}
        leaves = self.executor.loader.graph.leaf_nodes()
        return [*named, *(leaf for leaf in leaves if leaf[0] not in apps)]

    def migrate_to(self, named: list[tuple[str, str]]) -> StateApps:
        """Migrate to `named` (one migration per app of ours); the models as they were there."""
        targets = self._targets(named)
        self.executor.loader.build_graph()
        self.executor.migrate(targets)
        return self.executor.loader.project_state(targets).apps

    def migrate_to_head(self) -> list[str]:
        """Migrate to the latest migrations; what was applied (`app.name`)."""
        self.executor.loader.build_graph()
        targets = self.executor.loader.graph.leaf_nodes()
        plan = self.executor.migration_plan(targets)
        self.executor.migrate(targets)
        return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]

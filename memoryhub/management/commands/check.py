"""Django's `check`, which also checks the database server when it is an external one
(DATABASE_URL): its PostgreSQL and pgvector versions and this node's connections
(memoryhub/checks.py). Django checks the database only when asked (`--database`), and the
embedded server is never started for a check: pass `--database default` to check it too."""

from __future__ import annotations

from django.conf import settings
from django.core.management.commands.check import Command as DjangoCheck


class Command(DjangoCheck):
    def handle(self, *app_labels, **options):
        if options.get("databases") is None and settings.EMBEDDED_DB is None:
            options["databases"] = ["default"]
        return super().handle(*app_labels, **options)

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Tenant
from memories.jsonl import export_counts, export_tenant
from memoryhub.progress import Progress


class Command(BaseCommand):
    help = (
        "Write everything of a tenant that moves to another instance to a JSONL file "
        "(import it there with import_tenant); ends with one JSON line of counts per line type."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--tenant", required=True, help="the tenant's slug")
        parser.add_argument("--output", required=True, help="the file to write")

    def handle(self, *args: Any, **opts: Any) -> None:
        tenant = Tenant.objects.filter(slug=opts["tenant"]).first()
        if tenant is None:
            raise CommandError(f"No tenant '{opts['tenant']}'.")
        output = opts["output"]
        counts: Counter[str] = Counter()
        progress = None
        if sys.stderr.isatty():
            progress = Progress("exporting", sum(export_counts(tenant).values()))

        def tick(kind: str) -> None:
            counts[kind] += 1
            if progress is not None and kind in ("memory", "revision"):
                progress.advance()

        # Written beside the target and moved over it at the end: a failed export leaves no
        # half file behind under the name asked for.
        partial = f"{output}.partial"
        try:
            with open(partial, "w", encoding="utf-8") as out:
                for line in export_tenant(tenant, progress=tick):
                    out.write(line)
            os.replace(partial, output)
        except OSError as exc:
            raise CommandError(f"Cannot write {output}: {exc.strerror}") from exc
        finally:
            if os.path.exists(partial):
                os.remove(partial)
            if progress is not None:
                progress.close()
        summary = {"tenant": tenant.slug, "output": output, "lines": dict(counts)}
        self.stdout.write(json.dumps(summary))

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from memories.services.jsonl_import import ImportLineError
from memories.services.tenant_import import BATCH, ImportRefused, tenant_import
from memoryhub.progress import Progress


class Command(BaseCommand):
    help = (
        "Import a tenant file (from export_tenant or the console's Export tenant) into a new or "
        "empty tenant, all or nothing; prints each webhook's new secret once and ends with one "
        "JSON line of counts per line type."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="the JSONL file export_tenant wrote")
        parser.add_argument("--tenant", default=None, help="import under this slug instead")
        parser.add_argument("--batch-size", type=int, default=BATCH, help=f"default {BATCH}")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            source = open(opts["file"], "rb")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise CommandError(f"Cannot read {opts['file']}: {exc.strerror}") from exc
        progress = None
        if sys.stderr.isatty():
            progress = Progress("importing (bytes)", os.fstat(source.fileno()).st_size)
        try:
            result = tenant_import(
                lines=_read(source, progress),
                slug=opts["tenant"],
                batch_size=max(1, opts["batch_size"]),
            )
        except ImportLineError as exc:
            raise CommandError(f"line {exc.line}: {exc.message}. Nothing imported.") from exc
        except ImportRefused as exc:
            raise CommandError(str(exc)) from exc
        finally:
            source.close()
            if progress is not None:
                progress.close()
        slug = result.tenant.slug
        for hook in result.webhooks:
            self.stdout.write(
                f"webhook {hook.id} ({hook.url}): new signing secret {hook.secret} "
                "(shown this once; the old one is not carried)"
            )
        if result.agents:
            self.stdout.write(
                "API keys are not carried; issue new ones with: python manage.py create_api_key "
                f"--tenant {slug} --agent AGENT (agents: {', '.join(result.agents)})"
            )
        if result.other_model:
            self.stdout.write(
                f"{result.other_model} memories carry embeddings of another model than this "
                "instance's: run python manage.py reembed"
            )
        self.stdout.write(json.dumps({"tenant": slug, "imported": dict(result.counts)}))


def _read(source: BinaryIO, progress: Progress | None) -> Iterator[bytes]:
    for line in source:
        if progress is not None:
            progress.advance(len(line))
        yield line

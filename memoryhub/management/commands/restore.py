"""`manage.py restore FILE`: a backup into this instance's (empty) database, checked before
and after (memoryhub/backups, docs/operations.md#backups-and-restores)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from memoryhub.backups import BackupError, restore_backup
from memoryhub.management.commands.backup import terminal_progress


class Command(BaseCommand):
    help = (
        "Restore a backup (memoryhub-<timestamp>.dump, its manifest beside it) into an empty "
        "database, migrate it forward, and print what was checked."
    )

    def add_arguments(self, parser):
        parser.add_argument("file", type=Path, help="the .dump file")
        parser.add_argument(
            "--force",
            action="store_true",
            help="drop what the target database holds first (default: refuse a non-empty one)",
        )

    def handle(self, *args, **opts):
        progress = terminal_progress()
        try:
            report = restore_backup(opts["file"], force=opts["force"], progress=progress)
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if progress is not None:
                sys.stderr.write("\r\033[K")
        for check in report.checks:
            self.stdout.write(f"{'ok' if check.ok else 'FAILED'}  {check.name}: {check.detail}")
        failed = [check.name for check in report.checks if not check.ok]
        if failed:
            raise CommandError(
                f"restored {report.dump_path}, but checks failed: {', '.join(failed)}"
            )
        self.stdout.write(
            f"restored {report.dump_path} in {report.seconds:.1f}s: {len(report.checks)} checks passed"
        )

"""`manage.py backup`: the whole database as `pg_dump -Fc` plus its manifest
(memoryhub/backups, docs/operations.md#backups-and-restores)."""

from __future__ import annotations

import sys
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from memoryhub.backups import BackupError, create_backup, verify_backup


def terminal_progress():
    """Progress lines on stderr when it is a terminal; None (silent) otherwise."""
    if not sys.stderr.isatty():
        return None

    def show(line: str) -> None:
        sys.stderr.write(f"\r\033[K{line[:200]}")
        sys.stderr.flush()

    return show


class Command(BaseCommand):
    help = (
        "Back up the whole database online: one consistent snapshot as "
        "memoryhub-<UTC timestamp>.dump (pg_dump -Fc) and a manifest beside it."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--output",
            type=Path,
            help="directory to write to (created if missing; default: MEMORYHUB_DATA_DIR/backups)",
        )
        parser.add_argument(
            "--verify",
            action="store_true",
            help="then read the archive back (pg_restore --list) and check its sha256",
        )

    def handle(self, *args, **opts):
        progress = terminal_progress()
        try:
            result = create_backup(
                opts["output"] or settings.DATA_DIR / "backups", progress=progress
            )
            verified = ""
            if opts["verify"]:
                checked = verify_backup(result.dump_path, progress=progress)
                verified = f", verified ({checked.entries} archive entries, sha256 matches)"
        except BackupError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if progress is not None:
                sys.stderr.write("\r\033[K")
        tables = result.manifest["tables"]
        self.stdout.write(
            f"backup {result.dump_path} ({result.size_bytes / 1e6:.1f} MB, {len(tables)} tables, "
            f"{sum(tables.values())} rows) in {result.seconds:.1f}s{verified}; "
            f"manifest {result.manifest_path}"
        )

"""Whole-database backups and restores (docs/operations.md#backups-and-restores).

`create_backup` writes a `pg_dump -Fc` archive of one consistent snapshot and a manifest beside
it; `restore_backup` checks an archive and its manifest before touching the target, restores
it, migrates forward and verifies the result. The `backup` and `restore` commands, and any
scheduled job, call these two.
"""

from memoryhub.backups.create import BackupResult, create_backup
from memoryhub.backups.restore import RestoreReport, restore_backup
from memoryhub.backups.tools import BackupError
from memoryhub.backups.verify import VerifiedBackup, verify_backup

__all__ = [
    "BackupError",
    "BackupResult",
    "RestoreReport",
    "VerifiedBackup",
    "create_backup",
    "restore_backup",
    "verify_backup",
]

import logging

from django.apps import AppConfig
from django.db.models.signals import post_migrate

logger = logging.getLogger("memories.jobs.backup")


class MemoriesConfig(AppConfig):
    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_q.signals import post_spawn

        post_migrate.connect(
            _sync_after_migrate, sender=self, dispatch_uid="memories-backup-schedule"
        )
        post_spawn.connect(_sync_in_worker, dispatch_uid="memories-backup-schedule-worker")


def _sync_after_migrate(sender, using: str = "default", **kwargs) -> None:
    """After every `migrate`: the backup schedule as the settings say (a bad setting stops
    it, naming the variable)."""
    from memories.jobs.backup import backup_schedule_sync, schedule_table_exists

    if using == "default" and schedule_table_exists():
        backup_schedule_sync()


def _sync_in_worker(sender, **kwargs) -> None:
    """A django-q2 worker starting (with `serve`'s cluster or a `qcluster` of its own): the
    backup schedule as this node's settings say. Not in sync mode (the tests'), where every
    task runs in the caller's process and no cluster starts. A failure is logged: a worker
    that raised here would only be started again."""
    from django_q.conf import Conf

    from memories.jobs.backup import backup_schedule_sync

    if Conf.SYNC:
        return
    try:
        backup_schedule_sync()
    except Exception:
        logger.exception("the backup schedule was not brought in line with the settings")

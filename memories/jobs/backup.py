"""`backup`: the scheduled whole-database backup (docs/operations.md#scheduled-backups).

With MEMORYHUB_BACKUP_DIR set, one django-q2 schedule (`SCHEDULE_NAME`) runs
`run_job("backup")` every MEMORYHUB_BACKUP_SCHEDULE. A run writes a backup there
(`memoryhub.backups.create_backup`) and then keeps the MEMORYHUB_BACKUP_KEEP newest complete
ones: a backup is complete once its manifest exists, so older manifests go with their dumps,
and a `.dump.partial` (a backup being written, or one that crashed) is never touched.

The schedule row is what every node shares: `backup_schedule_sync` makes it match the
settings (created, changed, or removed when the directory is unset) after `migrate` and when a
django-q2 worker starts (`memories.apps`), and `backup_status` reads it, with the last successful run's
JobRun, for `/metrics` and the console's dashboard. django-q2's scheduler takes a due row
under a row lock, so a period's run is queued once however many clusters are running.

A failed run is logged, recorded as a failed JobRun by `run_job`, and announced by a
`backup.failed` event. Events belong to a tenant and a backup to the whole instance, so every
tenant gets one (no agent, category `workspace`: every key of the tenant sees it). It carries
the exception's class, never its message, which may name paths, hosts or the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import Subquery
from django_q.models import Schedule

from accounts.models import Tenant
from memories.clock import resolve_now
from memories.events.record import events_insert
from memories.jobs.batches import Progress, TenantCounts, report
from memories.models import Category, Event, JobRun
from memories.services.write_support import advisory_lock
from memoryhub.backups import create_backup
from memoryhub.durations import parse_duration

logger = logging.getLogger(__name__)

JOB = "backup"
SCHEDULE_NAME = "backup"
SCHEDULE_FUNC = "memories.tasks.run_job"
EVENT_TYPE = "backup.failed"

# What create_backup writes: `memoryhub-<UTC timestamp>` + these, so names sort by time.
_PREFIX = "memoryhub-"
_MANIFEST = ".manifest.json"
_DUMP = ".dump"

# MEMORYHUB_BACKUP_SCHEDULE words → django-q2 schedule types.
_WORDS = {
    "hourly": (Schedule.HOURLY, timedelta(hours=1)),
    "daily": (Schedule.DAILY, timedelta(days=1)),
    "weekly": (Schedule.WEEKLY, timedelta(weeks=1)),
}
_PERIODS = dict(_WORDS.values())


@dataclass(frozen=True)
class BackupPlan:
    """A schedule in django-q2's terms: its type, its minutes (type `I`) and its period."""

    schedule_type: str
    minutes: int | None
    period: timedelta


def backup_plan(value: str) -> BackupPlan:
    """`hourly`, `daily`, `weekly`, or a whole number of minutes, hours or days (`30m`, `6h`,
    `2d`). Anything else is ImproperlyConfigured, naming the setting."""
    word = value.strip().lower()
    if word in _WORDS:
        schedule_type, period = _WORDS[word]
        return BackupPlan(schedule_type, None, period)
    try:
        period = parse_duration(word)
    except ValueError as exc:
        raise ImproperlyConfigured(
            f"MEMORYHUB_BACKUP_SCHEDULE must be hourly, daily, weekly or a duration such as 6h "
            f"(got {value!r}): {exc}"
        ) from None
    minutes, seconds = divmod(int(period.total_seconds()), 60)
    # django-q2 keeps the minutes of an interval in a PositiveSmallIntegerField.
    if seconds or not 1 <= minutes <= 32767:
        raise ImproperlyConfigured(
            f"MEMORYHUB_BACKUP_SCHEDULE must be a whole number of minutes, at most 22 days "
            f"(got {value!r})"
        )
    return BackupPlan(Schedule.MINUTES, minutes, period)


def _keep() -> int:
    keep = settings.MEMORYHUB_BACKUP_KEEP
    if keep < 1:
        raise ImproperlyConfigured(
            f"MEMORYHUB_BACKUP_KEEP must be 1 or more (got {keep}): a run never deletes the "
            "backup it has just made"
        )
    return keep


def schedule_table_exists() -> bool:
    """django-q2's schedules are migrated (not so while a fresh database is being set up)."""
    return Schedule._meta.db_table in connection.introspection.table_names()


def backup_schedule_sync(*, now: datetime | None = None) -> Schedule | None:
    """Make the backup schedule match the settings and return it (None: backups are off).

    Created due at once (the first backup runs when a cluster next looks), changed in place
    when MEMORYHUB_BACKUP_SCHEDULE changes (due no later than one new period from now),
    deleted when MEMORYHUB_BACKUP_DIR is unset. Safe when several nodes start together."""
    now = resolve_now(now)
    rows = Schedule.objects.filter(name=SCHEDULE_NAME, func=SCHEDULE_FUNC)
    if not settings.MEMORYHUB_BACKUP_DIR:
        rows.delete()
        return None
    plan = backup_plan(settings.MEMORYHUB_BACKUP_SCHEDULE)
    _keep()
    wanted = {
        "args": repr(JOB),
        "schedule_type": plan.schedule_type,
        "minutes": plan.minutes,
        "repeats": -1,
    }
    with transaction.atomic():
        advisory_lock("memoryhub:backup-schedule")  # two nodes starting: still one row
        schedule = rows.order_by("pk").first()
        if schedule is None:
            return Schedule.objects.create(
                name=SCHEDULE_NAME, func=SCHEDULE_FUNC, next_run=now, **wanted
            )
        changed = {k: v for k, v in wanted.items() if getattr(schedule, k) != v}
        if changed:
            for key, value in changed.items():
                setattr(schedule, key, value)
            if schedule.next_run is None or schedule.next_run > now + plan.period:
                schedule.next_run = now + plan.period
            schedule.save()
        return schedule


def backup_database(
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    tenant_id: int | None = None,
    per_tenant: TenantCounts | None = None,
    progress: Progress | None = None,
) -> dict[str, int]:
    """Back the database up into MEMORYHUB_BACKUP_DIR and keep the MEMORYHUB_BACKUP_KEEP newest
    complete backups; return {"backups_kept", "backups_deleted"}. On failure: the error
    logged, a `backup.failed` event for every tenant, then the exception raised again (so
    `run_job` records the run as failed)."""
    if tenant_id is not None or dry_run:
        raise ValueError("a backup covers the whole database: no tenant scope, no dry run")
    directory = settings.MEMORYHUB_BACKUP_DIR
    if not directory:
        raise ValueError("MEMORYHUB_BACKUP_DIR is not set: scheduled backups are off")
    now = resolve_now(now)
    try:
        keep = _keep()
        result = create_backup(directory, progress=progress)
    except Exception as exc:
        logger.error("scheduled backup into %s failed: %s", directory, exc)
        _announce_failure(exc, now=now)
        raise
    deleted = prune_backups(Path(directory), keep=keep, made=result.manifest_path)
    kept = len(_complete_backups(Path(directory)))
    report(
        progress,
        f"backup {result.dump_path.name}: {result.size_bytes} bytes in {result.seconds:.1f} s; "
        f"{kept} kept, {len(deleted)} deleted",
    )
    logger.info(
        "scheduled backup %s written (%d bytes, %.1f s); %d kept, %d older deleted",
        result.dump_path,
        result.size_bytes,
        result.seconds,
        kept,
        len(deleted),
    )
    counts = {"backups_kept": kept, "backups_deleted": len(deleted)}
    if per_tenant is not None:
        # Not a tenant's share: the instance's files, the same for every tenant to see.
        for key, n in counts.items():
            per_tenant.add(key, ((pk, n) for pk in Tenant.objects.values_list("pk", flat=True)))
    return counts


def _complete_backups(directory: Path) -> list[Path]:
    """The manifests of the complete backups in `directory`, oldest first."""
    return sorted(directory.glob(f"{_PREFIX}*{_MANIFEST}"), key=lambda path: path.name)


def prune_backups(directory: Path, *, keep: int, made: Path) -> list[Path]:
    """Delete all but the `keep` newest complete backups, never `made` (the one this run
    wrote, even if a clock gone backwards gave it an older name); return the manifests
    deleted. The manifest goes first: a crash in between leaves a dump without a manifest,
    which nothing takes for a complete backup. A file that would not go is logged and left."""
    complete = [path for path in _complete_backups(directory) if path != made]
    older = complete[: max(len(complete) - (keep - 1), 0)]
    deleted = []
    for manifest in older:
        dump = manifest.with_name(manifest.name[: -len(_MANIFEST)] + _DUMP)
        try:
            manifest.unlink(missing_ok=True)  # another run may be pruning too
            dump.unlink(missing_ok=True)
        except OSError as exc:
            logger.warning("could not delete the old backup %s: %s", manifest, exc)
            continue
        deleted.append(manifest)
    return deleted


def _announce_failure(exc: Exception, *, now: datetime) -> None:
    data = {
        "job": JOB,
        "error_class": type(exc).__name__,
        "last_success_at": _iso(last_backup_at()),
    }
    try:
        with transaction.atomic():
            events_insert(
                [
                    Event(
                        tenant_id=pk,
                        type=EVENT_TYPE,
                        category=Category.WORKSPACE,
                        occurred_at=now,
                        data=data,
                    )
                    for pk in Tenant.objects.order_by("pk").values_list("pk", flat=True)
                ]
            )
    except Exception:  # the database may be what failed: the run's own error is what counts
        logger.exception("could not record the %s events", EVENT_TYPE)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


# --- what the metrics and the dashboard read ----------------------------------------------------


def _last_success():
    """The last successful backup run's end (a JobRun: the same on every node)."""
    return (
        JobRun.objects.filter(job=JOB, status="ok")
        .order_by("-started_at", "-id")
        .values("finished_at")[:1]
    )


def last_backup_at() -> datetime | None:
    """When the last successful backup run finished."""
    return _last_success().values_list("finished_at", flat=True).first()


@dataclass(frozen=True)
class BackupStatus:
    last_success_at: datetime | None
    period: timedelta
    # No successful backup yet, or the last one is older than two periods.
    overdue: bool


def backup_status(*, now: datetime | None = None) -> BackupStatus | None:
    """Scheduled backups as every node sees them, in one query; None when they are off (no
    schedule)."""
    row = (
        Schedule.objects.filter(name=SCHEDULE_NAME, func=SCHEDULE_FUNC)
        .order_by("pk")
        .annotate(last=Subquery(_last_success()))
        .values_list("schedule_type", "minutes", "last")
        .first()
    )
    if row is None:
        return None
    schedule_type, minutes, last = row
    if schedule_type == Schedule.MINUTES:
        period = timedelta(minutes=minutes or 1)
    else:
        period = _PERIODS.get(schedule_type, timedelta(days=1))
    overdue = last is None or resolve_now(now) - last > 2 * period
    return BackupStatus(last_success_at=last, period=period, overdue=overdue)

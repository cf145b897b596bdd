"""django-q2 entry points. Schedules, `manage.py` commands and the console's `Run now` all go
through `run_job`, which records one `JobRun` (a `PruneRun` for pruning) around the job.

Console: `async_task("memories.tasks.run_job", name, trigger="console", tenant_id=...)`: a
`Run now` works on the operator's tenant only, and its JobRun names that tenant. Scheduled and
command runs cover every tenant (no tenant on the JobRun) and record each tenant's share of the
counts in `JobRun.tenant_counts`, so the console can show a tenant its slice and nothing more.
The jobs are safe to run twice or side by side, so a retry after a lost worker is harmless.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import Tenant
from memories.clock import resolve_now
from memories.jobs.backup import backup_database
from memories.jobs.batches import Progress, TenantCounts
from memories.jobs.prune import prune_memories
from memories.jobs.reembed import reembed
from memories.jobs.retention_purge import purge_retention
from memories.models import JobRun, PruneRun
from memories.run_liveness import Liveness

JOBS: dict[str, Callable[..., dict]] = {
    "backup": backup_database,
    "prune_memories": prune_memories,
    "purge_retention": purge_retention,
    "reembed": reembed,
}


def _as_datetime(value: datetime | str | None) -> datetime | None:
    # A queued task may carry `now` as an ISO string.
    if value is None or isinstance(value, datetime):
        return value
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not an ISO 8601 time: {value!r}")
    return parsed if timezone.is_aware(parsed) else timezone.make_aware(parsed, UTC)


def run_job(
    name: str,
    *,
    trigger: str = "schedule",
    now: datetime | str | None = None,
    dry_run: bool = False,
    tenant_id: int | None = None,
    progress: Progress | None = None,
    **options,
) -> JobRun:
    """Run one job by name and return its finished JobRun (failed runs are recorded, then raise).

    `tenant_id` limits the run to that tenant (re-read here: a queued task carries the id).
    `options` go to the job (`batch_size`; `days` for purge_retention; `all` for reembed).
    """
    if name not in JOBS:
        raise ValueError(f"unknown job {name!r}; one of {', '.join(sorted(JOBS))}")
    as_of = resolve_now(_as_datetime(now))
    if tenant_id is not None and not Tenant.objects.filter(pk=tenant_id).exists():
        raise ValueError(f"no tenant with id {tenant_id}")
    _reap_abandoned(name)
    model = PruneRun if name == "prune_memories" else JobRun
    # Held from the moment the run is visible, so no other worker takes it for abandoned.
    with transaction.atomic():
        run = model.objects.create(
            job=name,
            trigger=trigger,
            tenant_id=tenant_id,
            as_of=as_of,
            dry_run=dry_run,
            started_at=timezone.now(),
        )
        _LIVENESS.hold(run.pk)
    started = time.monotonic()
    per_tenant = TenantCounts() if tenant_id is None else None
    try:
        with _LIVENESS.kept(run.pk):
            counts = JOBS[name](
                now=as_of,
                dry_run=dry_run,
                tenant_id=tenant_id,
                per_tenant=per_tenant,
                progress=progress,
                **options,
            )
    except BaseException as exc:  # also a Ctrl-C or a task timeout: never leave "running"
        run.status, run.error = "failed", f"{type(exc).__name__}: {exc}"[:2000]
        # Recording the failure must not mask it (the database may be what failed).
        with contextlib.suppress(Exception):
            _finish(run, started)
        raise
    run.status, run.counts = "ok", counts
    if per_tenant is not None:
        run.tenant_counts = per_tenant.slices(counts)
    _finish(run, started)
    return run


# A running JobRun holds its liveness (memories/run_liveness.py), so the next run can tell a
# killed run, which would otherwise say "running" forever, from one still at work.
_LIVENESS = Liveness(0x4D48_4A42)  # "MHJB"


def _reap_abandoned(name: str) -> None:
    for run_id in JobRun.objects.filter(job=name, status="running").values_list("pk", flat=True):
        if _LIVENESS.try_hold(run_id):
            JobRun.objects.filter(pk=run_id, status="running").update(
                status="failed",
                error="abandoned: the worker stopped before recording an end (killed or lost)",
                finished_at=timezone.now(),
            )
            _LIVENESS.release(run_id)


def _finish(run: JobRun, started: float) -> None:
    run.finished_at = timezone.now()
    run.duration_ms = int((time.monotonic() - started) * 1000)
    run.save(
        update_fields=["status", "error", "counts", "tenant_counts", "finished_at", "duration_ms"]
    )
    _LIVENESS.release(run.pk)

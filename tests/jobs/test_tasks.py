"""run_job and django-q2: schedules from the migration, Run now through async_task, JobRun rows."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django_q.models import Schedule
from django_q.tasks import async_task, result

from memories.embeddings import reset_embedder
from memories.models import JobRun, Memory, PruneRun
from memories.tasks import run_job
from memoryhub.errors import EmbeddingError
from tests.support.jobs import NOW, add_memories, ago

pytestmark = pytest.mark.django_db


def test_schedules_exist_after_migrate():
    schedules = {
        s.name: (s.func, s.args, s.schedule_type, s.minutes, s.repeats)
        for s in Schedule.objects.filter(func="memories.tasks.run_job")
    }
    assert schedules == {
        "prune_memories": ("memories.tasks.run_job", "'prune_memories'", "I", 10, -1),
        "purge_retention": ("memories.tasks.run_job", "'purge_retention'", "D", None, -1),
        "reembed": ("memories.tasks.run_job", "'reembed'", "H", None, -1),
    }


def test_run_now_through_async_task_records_a_job_run(tenant, agent):
    add_memories(tenant, agent, 2, expires_at=ago(hours=1))

    task_id = async_task("memories.tasks.run_job", "prune_memories", trigger="console", now=NOW)

    run = PruneRun.objects.get()
    assert (run.job, run.trigger, run.status, run.dry_run, run.as_of) == (
        "prune_memories",
        "console",
        "ok",
        False,
        NOW,
    )
    assert run.counts["expired"] == 2
    assert result(task_id).pk == run.pk
    assert Memory.objects.filter(status="expired").count() == 2


@pytest.mark.parametrize("job", ["purge_retention", "reembed"])
def test_every_job_runs_by_name(job):
    run = run_job(job, now="2026-06-01T12:00:00Z")
    assert (run.job, run.trigger, run.status, run.as_of) == (job, "schedule", "ok", NOW)
    assert run.finished_at is not None and run.duration_ms is not None
    assert not PruneRun.objects.exists()


def test_a_failing_job_is_recorded_as_failed_and_raises():
    reset_embedder()
    try:
        with (
            override_settings(MEMORYHUB_EMBEDDER="no-such-embedder"),
            pytest.raises(EmbeddingError),
        ):
            run_job("reembed", trigger="console")
    finally:
        reset_embedder()
    run = JobRun.objects.get()
    assert run.status == "failed"
    assert run.error.startswith("EmbeddingError")
    assert run.finished_at is not None


def test_unknown_job_is_refused():
    with pytest.raises(ValueError, match="unknown job 'defragment'"):
        run_job("defragment")
    assert not JobRun.objects.exists()


def test_bad_now_is_a_command_error():
    with pytest.raises(CommandError):
        call_command("prune_memories", "--now", "yesterday-ish")


def test_a_live_run_is_not_taken_for_abandoned(tenant, agent):
    """A run still at work (its connection holds the liveness lock) stays `running`."""
    from django.db import connections

    seen: list[str] = []

    def progress(line: str) -> None:
        if not seen:
            # Another process starting a run meanwhile must leave this one alone.
            running_id = JobRun.objects.get(status="running").pk
            other = connections.create_connection("default")
            try:
                with other.cursor() as cursor:
                    cursor.execute(
                        "SELECT pg_try_advisory_lock(%s::int, %s::int)", [0x4D48_4A42, running_id]
                    )
                    seen.append(cursor.fetchone()[0])
            finally:
                other.close()

    add_memories(tenant, agent, 1, expires_at=ago(hours=1))
    run_job("prune_memories", now=NOW, progress=progress)

    assert seen == [False]

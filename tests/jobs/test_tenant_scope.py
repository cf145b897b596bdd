"""Jobs scoped to one tenant (the console's `Run now`) and each tenant's share of a global run."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from memories.models import IdempotencyRecord, JobRun, Memory, PruneRun
from memories.tasks import run_job
from tests.factories import make_agent
from tests.support.commands import last_json_line
from tests.support.jobs import NOW, add_memories, ago

pytestmark = pytest.mark.django_db


@pytest.fixture
def two_tenants(tenant, agent, other_tenant):
    """acme: 2 expired, 1 old daily, 2 notes of an agent capped at 1; globex: 3 expired."""
    add_memories(tenant, agent, 2, expires_at=ago(hours=1))
    add_memories(tenant, agent, category="daily", updated_at=ago(hours=80))
    capped = make_agent(tenant, "capped", entry_cap=1)
    add_memories(tenant, capped, 2, category="notes")
    add_memories(other_tenant, make_agent(other_tenant, "globex-bot"), 3, expires_at=ago(hours=1))
    return tenant, other_tenant


def active(tenant) -> int:
    return Memory.objects.filter(tenant=tenant, status="active").count()


def test_a_tenant_scoped_prune_changes_that_tenant_only(two_tenants):
    acme, globex = two_tenants

    run = run_job("prune_memories", trigger="console", now=NOW, tenant_id=acme.pk)

    assert run.counts == {
        "expired": 2,
        "daily_pruned": 1,
        "conversation_ended": 0,
        "evicted": 1,
        "total": 4,
    }
    assert (active(acme), active(globex)) == (1, 3)
    assert (run.tenant_id, run.tenant_counts) == (acme.pk, {})
    assert PruneRun.objects.get(pk=run.pk).tenant == acme


def test_a_global_run_records_each_tenants_share(two_tenants):
    acme, globex = two_tenants

    dry = run_job("prune_memories", now=NOW, dry_run=True)
    run = run_job("prune_memories", now=NOW)

    assert run.tenant_id is None
    assert run.counts["total"] == 7
    assert run.tenant_counts == {
        str(acme.pk): {
            "expired": 2,
            "daily_pruned": 1,
            "conversation_ended": 0,
            "evicted": 1,
            "total": 4,
        },
        str(globex.pk): {
            "expired": 3,
            "daily_pruned": 0,
            "conversation_ended": 0,
            "evicted": 0,
            "total": 3,
        },
    }
    assert dry.tenant_counts == run.tenant_counts
    run.refresh_from_db()
    assert run.counts_for(globex) == run.tenant_counts[str(globex.pk)]


def test_counts_for_shows_own_runs_a_share_of_global_ones_and_nothing_of_others(
    tenant, other_tenant
):
    own = JobRun.objects.create(job="reembed", tenant=tenant, counts={"embedded": 5})
    other = JobRun.objects.create(job="reembed", tenant=other_tenant, counts={"embedded": 7})
    scheduled = JobRun.objects.create(
        job="reembed",
        counts={"embedded": 9, "candidates": 9},
        tenant_counts={str(other_tenant.pk): {"embedded": 9, "candidates": 9}},
    )

    assert own.counts_for(tenant) == {"embedded": 5}
    assert other.counts_for(tenant) == {}
    assert scheduled.counts_for(tenant) == {"embedded": 0, "candidates": 0}
    assert scheduled.counts_for(other_tenant) == {"embedded": 9, "candidates": 9}
    assert set(JobRun.objects.visible_to(tenant)) == {own, scheduled}


def test_a_tenant_scoped_retention_purge_deletes_that_tenants_rows_only(
    tenant, agent, other_tenant
):
    for owner, bot in ((tenant, agent), (other_tenant, make_agent(other_tenant, "globex-bot"))):
        for memory in add_memories(owner, bot, 2):
            Memory.objects.filter(pk=memory.pk).update(
                status="tombstoned", status_changed_at=ago(days=40), version=2
            )
        IdempotencyRecord.objects.create(
            tenant=owner,
            key_digest=f"k-{owner.slug}",
            request_hash="h",
            response_status=201,
            response_body={},
            created_at=ago(days=2),
        )

    scoped = run_job("purge_retention", now=NOW, tenant_id=tenant.pk)

    assert scoped.counts == {
        "memories_deleted": 2,
        "events_deleted": 0,
        "idempotency_deleted": 1,
        "messages_deleted": 0,
        "reads_deleted": 0,
    }
    assert Memory.objects.filter(tenant=other_tenant).count() == 2
    assert IdempotencyRecord.objects.filter(tenant=other_tenant).count() == 1
    rest = run_job("purge_retention", now=NOW)
    assert rest.tenant_counts == {
        str(other_tenant.pk): {
            "memories_deleted": 2,
            "events_deleted": 0,
            "idempotency_deleted": 1,
            "messages_deleted": 0,
            "reads_deleted": 0,
        }
    }


def test_a_tenant_scoped_reembed_embeds_that_tenants_memories_only(tenant, agent, other_tenant):
    add_memories(tenant, agent, 2)
    add_memories(other_tenant, make_agent(other_tenant, "globex-bot"), 3)

    scoped = run_job("reembed", tenant_id=tenant.pk)

    assert scoped.counts == {"candidates": 2, "embedded": 2, "skipped_changed": 0}
    assert Memory.objects.filter(tenant=other_tenant, vector__isnull=True).count() == 3
    rest = run_job("reembed")
    assert rest.tenant_counts == {
        str(other_tenant.pk): {"candidates": 3, "embedded": 3, "skipped_changed": 0}
    }


def test_tenant_option_of_the_commands(two_tenants):
    acme, globex = two_tenants
    out = StringIO()

    call_command("prune_memories", "--now", NOW.isoformat(), "--tenant", "globex", stdout=out)

    assert last_json_line(out.getvalue())["expired"] == 3
    assert (active(acme), active(globex)) == (5, 0)
    with pytest.raises(CommandError):
        call_command("prune_memories", "--tenant", "initech")


def test_an_unknown_tenant_id_is_refused():
    with pytest.raises(ValueError, match="no tenant with id 987654"):
        run_job("reembed", tenant_id=987654)
    assert not JobRun.objects.exists()

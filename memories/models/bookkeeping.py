"""What the service keeps about memories besides the memories themselves: each owner's count of
active memories (caps), stored idempotent responses, and the runs of background jobs."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Tenant, TenantQuerySet


class OwnerCount(models.Model):
    """How many `active` memories an owner has, kept by PostgreSQL triggers
    (memories/sql/owner_counts.sql).

    The store-time cap check reads this one row instead of counting the owner's memories: an
    owner whose active count is within its cap cannot be over it (live ≤ active). Statement
    triggers on `memories_memory` (insert, update, delete; transition tables, one aggregate per
    statement) keep it exact whoever writes: services, jobs' raw SQL, bulk loads, imports.
    """

    tenant_id = models.BigIntegerField()
    # The agent's id; 0 for the tenant's workspace; USER_OWNER for one subject's user memories.
    owner_id = models.BigIntegerField()
    # The subject of user memories (a cap per subject); '' for every other owner.
    subject_id = models.CharField(max_length=255, default="", blank=True)
    active = models.BigIntegerField(default=0)

    objects = TenantQuerySet.as_manager()

    USER_OWNER = -1

    class Meta:
        constraints = [
            # The cap check's lookup, and the triggers' ON CONFLICT target.
            models.UniqueConstraint(
                fields=["tenant_id", "owner_id", "subject_id"], name="ownercount_owner_uniq"
            ),
        ]


class IdempotencyRecord(models.Model):
    """A stored response for `Idempotency-Key` replays (per tenant, kept 24 h).

    The key itself is never stored, only `memories.idempotency.key_digest` of it: a client may
    paste anything into a header, a credential included."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key_digest = models.CharField(max_length=64)
    request_hash = models.CharField(max_length=64)
    response_status = models.PositiveSmallIntegerField()
    response_body = models.JSONField()
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # Replay lookup by (tenant, key); also what makes a concurrent retry wait for the first.
            models.UniqueConstraint(
                fields=["tenant", "key_digest"], name="idempotency_tenant_key_uniq"
            ),
        ]
        indexes = [
            # purge_retention drops records past 24 h.
            models.Index(fields=["created_at"], name="idempotency_created_idx"),
        ]


class JobRunQuerySet(TenantQuerySet):
    def visible_to(self, tenant: Tenant) -> models.QuerySet:
        """The runs an operator of `tenant` may see: the tenant's own and the global ones."""
        return self.filter(Q(tenant=tenant) | Q(tenant__isnull=True))


class JobRun(models.Model):
    """One run of a background job (prune, retention purge, re-embed) with its counts.

    A scheduled or command run covers every tenant: `tenant` is empty and `tenant_counts` holds
    each tenant's share of `counts` ({tenant id: {count: n}}; a tenant left out had none). A
    console `Run now` covers the operator's tenant only and names it.
    """

    job = models.CharField(max_length=64)
    trigger = models.CharField(max_length=32, default="schedule")  # schedule | command | console
    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    as_of = models.DateTimeField(null=True, blank=True)  # the `--now` the rules were evaluated at
    dry_run = models.BooleanField(default=False)
    status = models.CharField(max_length=16, default="running")  # running | ok | failed
    counts = models.JSONField(default=dict)
    tenant_counts = models.JSONField(default=dict, blank=True)
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    objects = JobRunQuerySet.as_manager()

    class Meta:
        indexes = [
            # Dashboard: the last runs of each job.
            models.Index(F("job"), F("started_at").desc(), name="jobrun_job_recent_idx"),
            # Jobs page: a tenant's last runs, and the last global ones (tenant NULL).
            models.Index(F("tenant"), F("started_at").desc(), name="jobrun_tenant_recent_idx"),
        ]

    def counts_for(self, tenant: Tenant) -> dict[str, int]:
        """The counts an operator of `tenant` may see: all of its own run's, its share of a
        global run's (zeros where it had none), nothing of another tenant's run."""
        if self.tenant_id == tenant.pk:
            return self.counts
        if self.tenant_id is not None:
            return {}
        share = self.tenant_counts.get(str(tenant.pk), {})
        return {key: share.get(key, 0) for key in self.counts}


# A dynamic base the stubs cannot follow (their plugin wants it assigned to a module name).
class PruneRunManager(models.Manager.from_queryset(JobRunQuerySet)):  # type: ignore[misc]
    def get_queryset(self):
        return super().get_queryset().filter(job="prune_memories")


class PruneRun(JobRun):
    """The `prune_memories` runs (the job's run record)."""

    objects = PruneRunManager()  # type: ignore[misc]  # JobRun's manager, narrowed to prunes

    class Meta:
        proxy = True

    def save(self, *args, **kwargs):
        self.job = "prune_memories"
        super().save(*args, **kwargs)


class RunLease(models.Model):
    """A running run's claim behind a transaction-mode pooler (memories/run_liveness.py): its
    holder's token and until when it holds unless renewed. Released runs have no row."""

    name = models.CharField(max_length=64, primary_key=True)  # "<namespace>:<run id>"
    owner = models.CharField(max_length=32)
    until = models.DateTimeField()

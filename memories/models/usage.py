"""How much a tenant's memories are read, per UTC day: the console dashboard's "reads" chart.

Writes need no counter of their own (every change writes a revision, counted by day from
`revision_recent_idx`); reads change nothing, so `memories.access` counts them here, merged
like its access bumps (one upsert per flush). `purge_retention` deletes the days the dashboard
no longer draws, after a margin (MEMORYHUB_READS_RETENTION_DAYS, never under DASHBOARD_DAYS).
"""

from __future__ import annotations

from django.db import models

from accounts.models import Tenant, TenantQuerySet

# The UTC days the dashboard's charts draw, today included (`memories.console.trends`): the
# least `purge_retention` keeps of `DailyReads`.
DASHBOARD_DAYS = 30


class DailyReads(models.Model):
    """Reads of one tenant on one UTC day: each get or recall that found a memory, each search
    and each hydrate (REST and MCP alike)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    day = models.DateField()
    reads = models.BigIntegerField(default=0)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # The counter's upsert target, and the dashboard's last 30 days of one tenant.
            models.UniqueConstraint(fields=["tenant", "day"], name="dailyreads_day_uniq"),
        ]


class RateLimitCounter(models.Model):
    """One API key's requests in its current minute, shared by every node
    (`memories.ratelimit`): a new window replaces the old one in place. UNLOGGED (the
    migration): a counter lost in a crash or a failover only restarts a minute."""

    bucket = models.CharField(max_length=64, primary_key=True)
    window_start = models.DateTimeField()
    hits = models.BigIntegerField()

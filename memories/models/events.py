"""The change feed: events, and the webhooks that deliver them.

An `Event` is written in the transaction of the change that causes it (`memories.events`), so a
rolled-back change leaves none. Its public `id` is `position`, given once the event is committed
(`memories.events.feed.sequence`): positions grow in the order events become visible, so a
reader that has seen position n never later finds a smaller one it missed (ids handed out at
insert would: a transaction that took id 10 may commit after one that took 11).
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from accounts.models import Agent, Tenant, TenantQuerySet
from memories.ids import new_ulid
from memories.models.memory import Scope

MEMORY_EVENT_TYPES = (
    "memory.created",
    "memory.updated",
    "memory.forgotten",
    "memory.evicted",
    "memory.expired",
    "memory.purged",
)
EVENT_TYPES = (
    *MEMORY_EVENT_TYPES,
    "review.pending",
    "review.resolved",
    "extraction.completed",
    "extraction.failed",
    "subject.erased",
    "backup.failed",
)
# The sequence positions are drawn from (memories/sql/event_positions.sql): never reused, even
# once retention has deleted every event.
POSITION_SEQUENCE = "memories_event_position_seq"


class Event(models.Model):
    """One change. `agent`, `category`, `subject_id` and `scope` are the columns the
    owner/subject rule (`memories.visibility.visible_q`) reads, so an agent's feed is filtered
    by the very rule its memory reads are: a memory's event carries the memory's owner,
    category, subject and scope (a user memory's: no agent, scope `user`, its subject: seen by
    every agent acting for that subject); an extraction run's carries its thread's
    agent and subject and the category `conversation` (a thread is its agent's own: agents
    reading from it do not see it); a subject's erasure is the tenant's (no agent, category
    `workspace`), and so is a failed scheduled backup's (one event in every tenant: a backup
    is the whole instance's). Events that are not a memory's have scope `agent`, as a
    workspace memory has."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    # The public id, given after commit (NULL until then); drawn from POSITION_SEQUENCE.
    position = models.BigIntegerField(null=True, blank=True)
    type = models.CharField(max_length=32)
    agent = models.ForeignKey(
        Agent, on_delete=models.CASCADE, null=True, blank=True, related_name="+", db_index=False
    )
    category = models.CharField(max_length=40, null=True, blank=True)
    subject_id = models.CharField(max_length=255, null=True, blank=True)
    # The memory's scope. Defaults in the database too, like `Memory.scope`.
    scope = models.CharField(
        max_length=8, choices=Scope.choices, default=Scope.AGENT, db_default=Scope.AGENT
    )
    memory_id = models.CharField(max_length=30, null=True, blank=True)
    version = models.PositiveIntegerField(null=True, blank=True)
    occurred_at = models.DateTimeField(default=timezone.now)
    # The public memory object (operator's view; `source` is set per reader), or the run's or
    # erasure's summary. Never purged content: a purge erases it from earlier events too.
    data = models.JSONField(default=dict)

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            # GET /api/v1/events and webhook fan-out: a tenant's events after a position.
            models.Index(
                F("tenant"),
                F("position"),
                condition=Q(position__isnull=False),
                name="event_feed_idx",
            ),
            # The sequencer: committed events still waiting for a position, oldest first.
            models.Index(F("id"), condition=Q(position__isnull=True), name="event_unsequenced_idx"),
            # A purge erases the content of a memory's earlier events.
            models.Index(
                F("tenant"),
                F("memory_id"),
                condition=Q(memory_id__isnull=False),
                name="event_memory_idx",
            ),
            # purge_retention: a tenant's events past MEMORYHUB_EVENT_RETENTION_DAYS.
            models.Index(fields=["tenant", "occurred_at"], name="event_retention_idx"),
        ]


def new_webhook_id() -> str:
    return "wh_" + new_ulid()


class WebhookEndpoint(models.Model):
    """Where a tenant's events are POSTed. The signing secret is shown once and kept
    encrypted (`memories.webhooks.secrets`)."""

    id = models.CharField(primary_key=True, max_length=30, default=new_webhook_id, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    url = models.CharField(max_length=2000)
    # The event types it wants; empty: all of them.
    events = ArrayField(models.CharField(max_length=32), default=list, blank=True)
    description = models.CharField(max_length=200, blank=True, default="")
    secret_encrypted = models.TextField()
    created_by = models.CharField(max_length=255)
    created_at = models.DateTimeField(default=timezone.now)
    # The last event position turned into deliveries for it.
    cursor = models.BigIntegerField(default=0)
    # Since when every attempt has failed (NULL after a success); 24 h of it disables it.
    failing_since = models.DateTimeField(null=True, blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=200, blank=True, default="")

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            # The console's and REST's list, and the dispatcher's endpoints of a tenant.
            models.Index(fields=["tenant", "created_at"], name="webhook_tenant_idx"),
        ]

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None


class DeliveryState(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One event for one endpoint: its attempts, the last status code and error (the delivery
    log). Pending ones are retried with exponential backoff for 24 h."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries", db_index=False
    )
    # No database constraint: retention deletes events (and their deliveries) in SQL.
    event = models.ForeignKey(
        Event, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    position = models.BigIntegerField()
    event_type = models.CharField(max_length=32)
    memory_id = models.CharField(max_length=30, null=True, blank=True)
    state = models.CharField(
        max_length=16, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    # A resend from the log: sent as soon as it can be, outside the per-memory order.
    resend = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    first_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=300, blank=True, default="")
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            # The dispatcher: pending deliveries that are due.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(state="pending"),
                name="delivery_due_idx",
            ),
            # Per-memory order: an earlier pending delivery of the same memory holds it back.
            models.Index(
                fields=["endpoint", "memory_id", "position"],
                condition=Q(state="pending", resend=False),
                name="delivery_memory_order_idx",
            ),
            # The delivery log of an endpoint, newest first; retention by event.
            models.Index(F("endpoint"), F("id").desc(), name="delivery_log_idx"),
            models.Index(fields=["tenant", "created_at"], name="delivery_retention_idx"),
        ]

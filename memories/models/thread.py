"""Conversations (docs/formation.md): threads, their messages, and the extraction runs that form
memories from them."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Agent, Tenant, TenantQuerySet

MAX_MESSAGE_CHARS = 32_000
MAX_SUMMARY_CHARS = 4_000


class Role(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    SYSTEM = "system", "System"
    TOOL = "tool", "Tool"


class Thread(models.Model):
    """One conversation of an agent (and subject): its messages, rolling summary and watermarks.

    Seqs: `last_seq` is the newest message's; messages up to `extracted_seq` have been through an
    applied extraction run (the watermark); messages up to `summarized_seq` are folded into
    `summary`. `extraction_due_at` is when the sleep-time schedule should extract it next (NULL:
    nothing pending, or extraction off).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="threads")
    thread_id = models.CharField(max_length=255)
    subject_id = models.CharField(max_length=255, null=True, blank=True)
    summary = models.TextField(blank=True, default="")
    summarized_seq = models.PositiveIntegerField(default=0)
    last_seq = models.PositiveIntegerField(default=0)
    extracted_seq = models.PositiveIntegerField(default=0)
    message_count = models.PositiveIntegerField(default=0)
    memories_added = models.PositiveIntegerField(default=0)
    memories_updated = models.PositiveIntegerField(default=0)
    last_message_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    extraction_due_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # A thread is addressed by (tenant, agent, subject, thread_id); NULL subject is one.
            models.UniqueConstraint(
                F("tenant"),
                F("agent"),
                Coalesce("subject_id", models.Value("")),
                F("thread_id"),
                name="thread_identity_uniq",
            ),
        ]
        indexes = [
            # Console Threads page: a tenant's threads, most recently active first.
            models.Index(
                F("tenant"), F("updated_at").desc(), F("id").desc(), name="thread_recent_idx"
            ),
            # Subject erasure: every thread of one subject in a tenant.
            models.Index(fields=["tenant", "subject_id"], name="thread_subject_idx"),
            # Sleep-time schedule: due threads across tenants (a job, not a request path).
            models.Index(
                fields=["extraction_due_at"],
                condition=Q(extraction_due_at__isnull=False),
                name="thread_due_idx",
            ),
            # Message retention: ended threads by end time (a job across tenants).
            models.Index(
                fields=["ended_at"], condition=Q(ended_at__isnull=False), name="thread_ended_idx"
            ),
        ]

    def __str__(self) -> str:
        return self.thread_id

    @property
    def pending_messages(self) -> int:
        return max(self.last_seq - self.extracted_seq, 0)


class Message(models.Model):
    """One message of a thread, stored after secret redaction (never the secret itself)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=16, choices=Role.choices)
    content = models.TextField()
    name = models.CharField(max_length=255, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The secret rules whose spans were replaced by `[redacted:<rule>]` (console badges).
    redactions = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    # SHA-256 of (role, content as received, created_at): a resent message is a duplicate.
    dedup_hash = models.CharField(max_length=64)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # Paging a thread's messages in order; seqs are dense from 1.
            models.UniqueConstraint(
                fields=["tenant", "thread", "seq"], name="message_thread_seq_uniq"
            ),
            # Duplicate-message skipping (ON CONFLICT DO NOTHING).
            models.UniqueConstraint(
                fields=["tenant", "thread", "dedup_hash"], name="message_thread_dedup_uniq"
            ),
        ]


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    DEFERRED = "deferred", "Deferred"


OPEN_RUN_STATES = (RunState.QUEUED, RunState.RUNNING)


class ExtractionRun(models.Model):
    """One extraction over a thread's messages `from_seq`..`to_seq`.

    `answer` keeps the model's validated operations once received, so a run retried after its
    worker died applies them without asking the model again; `offered_ids`, kept with it, are
    the memories the prompt offered as changeable (an operation on any other is
    `out_of_scope`), so a retry judges the kept answer by what the model was shown. Operations
    are applied in batches, each committed with the run's progress (`applied_ops`, `counts`),
    so a retry resumes after the last batch; moving the thread's watermark and marking the run
    `done` happen together, after the last batch.
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    thread = models.ForeignKey(
        Thread, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    trigger = models.CharField(max_length=16)  # schedule | now | extract | end | console
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    model = models.CharField(max_length=200, blank=True, default="")
    prompt_version = models.CharField(max_length=64, blank=True, default="")
    from_seq = models.PositiveIntegerField(default=0)
    to_seq = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    llm_ms = models.PositiveIntegerField(default=0)  # time spent waiting for the model
    server_ms = models.PositiveIntegerField(default=0)  # our own time, the model's excluded
    counts = models.JSONField(default=dict, blank=True)
    answer = models.JSONField(null=True, blank=True)
    # The ids of the memories the prompt offered as changeable (set with `answer`).
    offered_ids = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    # How many of the answer's operations are applied (committed with each batch).
    applied_ops = models.PositiveIntegerField(default=0)
    error_class = models.CharField(max_length=200, blank=True, default="")
    error_message = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # One run per thread at a time: a second trigger finds the open one.
            models.UniqueConstraint(
                fields=["thread"],
                condition=Q(state__in=["queued", "running"]),
                name="extractionrun_one_open_uniq",
            ),
        ]
        indexes = [
            # Thread detail: a thread's runs, newest first.
            models.Index(
                F("tenant"), F("thread"), F("created_at").desc(), name="extractionrun_thread_idx"
            ),
            # Jobs page and the daily token budget: a tenant's runs by time.
            models.Index(F("tenant"), F("created_at").desc(), name="extractionrun_recent_idx"),
        ]

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

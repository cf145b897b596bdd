from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any, Self, TypeVar

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from memoryhub.durations import format_duration

# `\Z`, not `$`: a validator searches, and `$` also matches before a final "\n".
SLUG_VALIDATOR = RegexValidator(r"^[a-z0-9][a-z0-9_-]{0,62}\Z", "Use a-z, 0-9, _ and -.")
CATEGORY_RE = r"^[a-z0-9_-]{1,40}\Z"
MAX_RETENTION_SECONDS = 100 * 365 * 86400


def validate_retention(value: object) -> None:
    """A `max_retention` policy: {category: seconds}, each a whole number of seconds > 0."""
    if not isinstance(value, dict):
        raise ValidationError("A retention policy maps categories to durations.")
    for category, seconds in value.items():
        if not isinstance(category, str) or not re.fullmatch(CATEGORY_RE, category):
            raise ValidationError(f"“{str(category)[:40]}” is not a category.")
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int)
            or not 0 < seconds <= MAX_RETENTION_SECONDS
        ):
            raise ValidationError(f"The retention of “{category}” must be a positive duration.")


_M = TypeVar("_M", bound=models.Model)


class TenantQuerySet(models.QuerySet[_M]):
    """The one way to start a query over a tenant-owned model: `X.objects.for_tenant(t)`."""

    def for_tenant(self, tenant: Tenant | int) -> Self:
        tenant_id = tenant if isinstance(tenant, int) else tenant.pk
        return self.filter(tenant_id=tenant_id)


class Tenant(models.Model):
    slug = models.CharField(max_length=63, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200, blank=True)
    # Live workspace (tenant-wide) memories allowed before the coldest is evicted.
    workspace_cap = models.PositiveIntegerField(default=10000)
    # LLM tokens extraction may spend per UTC day (0: unlimited); over it runs wait `deferred`.
    extraction_daily_token_budget = models.PositiveBigIntegerField(default=0)
    # Live user-scoped memories allowed per subject before the coldest is evicted.
    user_cap = models.PositiveIntegerField(default=1000)
    # The longest a memory of a category may live after its last write, in
    # seconds by category ({"daily": 259200}); an agent's own entry for a category wins.
    max_retention = models.JSONField(default=dict, blank=True, validators=[validate_retention])
    # Bumped with every change to the tenant's kind registry: a process caches a
    # registry under (tenant, version), and the version comes with the tenant's row.
    kinds_version = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug

    def policy(self) -> dict[str, Any]:
        """The tenant's memory policy, as `tenant_policy` prints it."""
        return {
            "tenant": self.slug,
            "workspace_cap": self.workspace_cap,
            "user_cap": self.user_cap,
            "max_retention": retention_json(self.max_retention),
            "extraction_daily_token_budget": self.extraction_daily_token_budget,
        }


def retention_json(stored: dict[str, int]) -> dict[str, str]:
    """A stored `max_retention` ({category: seconds}) as durations: {"daily": "72h"}."""
    return {
        category: format_duration(timedelta(seconds=seconds))
        for category, seconds in sorted(stored.items())
    }


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    REVIEWER = "reviewer", "Reviewer"
    VIEWER = "viewer", "Viewer"


ROLE_RANK: dict[str, int] = {Role.VIEWER: 0, Role.REVIEWER: 1, Role.ADMIN: 2, Role.OWNER: 3}


class Membership(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # One role per operator and tenant; serves the console's membership lookup.
            models.UniqueConstraint(fields=["tenant", "user"], name="membership_tenant_user_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"

    def has_role(self, needed: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(needed)]


class Extraction(models.TextChoices):
    """How an agent's conversations become memories."""

    OFF = "off", "Off"
    REVIEW = "review", "Review"  # every extracted memory waits in the review queue
    AUTO = "auto", "Auto"  # only those below `review_below` wait


# The policy's ceiling for `extraction_max_operations`: even batched, an answer must apply well
# within a worker's task time limit.
MAX_EXTRACTION_OPERATIONS = 1000


def default_extraction_categories() -> list[str]:
    return ["core", "daily"]


class Agent(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    slug = models.CharField(max_length=63, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=200, blank=True)
    entry_cap = models.PositiveIntegerField(default=1000)
    hydration_budget_bytes = models.PositiveIntegerField(default=8000)
    default_category = models.CharField(
        max_length=40, default="core", validators=[RegexValidator(CATEGORY_RE)]
    )
    dedup_threshold = models.FloatField(
        default=0.90, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    default_ttl = models.DurationField(null=True, blank=True)
    reads_from = models.ManyToManyField(
        "self", symmetrical=False, blank=True, related_name="readers"
    )
    # Memory formation from conversations.
    extraction = models.CharField(max_length=8, choices=Extraction.choices, default="auto")
    extraction_idle_seconds = models.PositiveIntegerField(default=120)
    extraction_min_confidence = models.FloatField(
        default=0.5, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    review_below = models.FloatField(
        default=0.8, validators=[MinValueValidator(0.0), MaxValueValidator(1.0)]
    )
    extraction_categories = ArrayField(
        models.CharField(max_length=40, validators=[RegexValidator(CATEGORY_RE)]),
        default=default_extraction_categories,
        blank=True,
    )
    summary_threshold_bytes = models.PositiveIntegerField(
        default=16000, validators=[MinValueValidator(1000)]
    )
    # The most operations one model answer may apply; the rest are dropped (`over_limit`).
    extraction_max_operations = models.PositiveIntegerField(
        default=50,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_EXTRACTION_OPERATIONS)],
    )
    # Block limits of hydrate: per core block (user, agent), and the archival list.
    core_max_entries = models.PositiveIntegerField(default=20)
    core_max_chars = models.PositiveIntegerField(default=4000)
    archival_max_chars = models.PositiveIntegerField(default=8000)
    # Formation: messages before the watermark shown as read-only context,
    # and whether facts about the person may be formed as user-scoped memories.
    context_messages = models.PositiveIntegerField(default=20, validators=[MaxValueValidator(200)])
    formation_user_scope = models.BooleanField(default=True)
    # Retention by category in seconds; wins over the tenant's for that category.
    max_retention = models.JSONField(default=dict, blank=True, validators=[validate_retention])
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()
    # The ids of `reads_from`, cached on the instance by the visibility checks (no column).
    _reads_from_ids: list[int]

    class Meta:
        constraints = [
            # Agents are addressed by (tenant, slug) in keys, commands and the console.
            models.UniqueConstraint(fields=["tenant", "slug"], name="agent_tenant_slug_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.slug}"

    def policy(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant.slug,
            "agent": self.slug,
            "entry_cap": self.entry_cap,
            "hydration_budget_bytes": self.hydration_budget_bytes,
            "default_category": self.default_category,
            "dedup_threshold": self.dedup_threshold,
            "default_ttl": format_duration(self.default_ttl) if self.default_ttl else None,
            "reads_from": sorted(a.slug for a in self.reads_from.all()),
            "extraction": self.extraction,
            "extraction_idle_seconds": self.extraction_idle_seconds,
            "extraction_min_confidence": self.extraction_min_confidence,
            "review_below": self.review_below,
            "extraction_categories": list(self.extraction_categories),
            "summary_threshold_bytes": self.summary_threshold_bytes,
            "extraction_max_operations": self.extraction_max_operations,
            "core_max_entries": self.core_max_entries,
            "core_max_chars": self.core_max_chars,
            "archival_max_chars": self.archival_max_chars,
            "context_messages": self.context_messages,
            "formation_user_scope": self.formation_user_scope,
            "max_retention": retention_json(self.max_retention),
        }


class Scope(models.TextChoices):
    READ = "read", "Read"
    WRITE = "write", "Write"
    ADMIN = "admin", "Admin"


class ApiKey(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=200, blank=True)
    # `mh_` + the first 8 random characters: finds the row; the hash proves the key.
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    scopes = ArrayField(models.CharField(max_length=16, choices=Scope.choices), default=list)
    subject_id = models.CharField(max_length=255, null=True, blank=True)
    created_by = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # Every memory written through this key expires at most this long after its last write
    # (an anonymous tier's 24 h, a trial's 30 d).
    memory_ttl = models.DurationField(null=True, blank=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        indexes = [
            # Agents page: an agent's keys, newest first.
            models.Index(fields=["tenant", "agent", "-created_at"], name="apikey_tenant_agent_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(scopes__contained_by=["read", "write", "admin"]),
                name="apikey_scopes_known",
            ),
        ]

    # Writing last_used_at on every request would cost a write per read; once a minute is enough.
    LAST_USED_RESOLUTION = timedelta(minutes=1)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.agent})"

    def is_active(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

"""The kind registry: per tenant, the kinds of memory with their cardinality, type,
description for models, optional JSON Schema of `data`, and default category."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import Tenant, TenantQuerySet


class Cardinality(models.TextChoices):
    SINGLE = "single", "Single"  # one live version of the truth per owner and subject
    MULTIPLE = "multiple", "Multiple"  # appended


class MemoryType(models.TextChoices):
    SEMANTIC = "semantic", "Semantic"
    EPISODIC = "episodic", "Episodic"
    PROCEDURAL = "procedural", "Procedural"


class Kind(models.Model):
    """A kind registered for a tenant. A memory's `kind` that names none is a free label and
    behaves as `fact`."""

    # No single-column index: the unique constraint leads with tenant.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=60)
    cardinality = models.CharField(
        max_length=8, choices=Cardinality.choices, default=Cardinality.MULTIPLE
    )
    memory_type = models.CharField(
        max_length=12, choices=MemoryType.choices, default=MemoryType.SEMANTIC
    )
    description = models.TextField(blank=True, default="")
    # A JSON Schema (draft 2020-12) for the memory's `data`; NULL: `data` is not checked.
    schema = models.JSONField(null=True, blank=True)
    # The category a store of this kind gets when it names none (NULL: the agent's default).
    default_category = models.CharField(max_length=40, null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            # The registry's lookup by (tenant, name): REST, MCP tools, stores.
            models.UniqueConstraint(fields=["tenant", "name"], name="kind_tenant_name_uniq"),
            models.CheckConstraint(
                condition=models.Q(cardinality__in=["single", "multiple"]),
                name="kind_cardinality_known",
            ),
            models.CheckConstraint(
                condition=models.Q(memory_type__in=["semantic", "episodic", "procedural"]),
                name="kind_memory_type_known",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def single(self) -> bool:
        return self.cardinality == Cardinality.SINGLE

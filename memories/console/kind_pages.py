"""The Kinds page: a tenant's kinds with their live counts; create and edit (the
schema checked on save by the same service as `PUT /api/v1/kinds/{name}`), delete; and the
Tenant page: the tenant's memory policy (user cap, retention). Also how a memory's `data` is
shown: a table of its kind's schema fields."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.console import ConsoleRequest, require_role
from accounts.models import Role
from memories import kind_registry
from memories.console.forms import TenantPolicyForm, retention_text
from memories.console.view_helpers import done, refuse_on_form, render, service_errors
from memories.models import Kind, Memory
from memories.services import kind_changes
from memories.services.policies import tenant_policy_set
from memoryhub.errors import DomainError


class KindForm(forms.Form):
    name = forms.CharField(max_length=60, label="Name", help_text="e.g. UserProfile")
    cardinality = forms.ChoiceField(
        choices=[
            ("multiple", "multiple: appended"),
            ("single", "single: one per owner and subject"),
        ],
        label="Cardinality",
    )
    memory_type = forms.ChoiceField(
        choices=[("semantic", "semantic"), ("episodic", "episodic"), ("procedural", "procedural")],
        label="Memory type",
    )
    description = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        required=False,
        max_length=kind_changes.MAX_DESCRIPTION_CHARS,
        label="Description",
        help_text="Shown to models (MCP tool, formation)",
    )
    default_category = forms.CharField(
        max_length=40, required=False, label="Default category", help_text="empty: the agent's"
    )
    schema = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "class": "mono"}),
        required=False,
        label="Schema",
        help_text="JSON Schema (draft 2020-12) of the memory's data; empty: none",
    )

    @classmethod
    def of(cls, kind: Kind) -> KindForm:
        return cls(
            initial={
                "name": kind.name,
                "cardinality": kind.cardinality,
                "memory_type": kind.memory_type,
                "description": kind.description,
                "default_category": kind.default_category or "",
                "schema": json.dumps(kind.schema, indent=2) if kind.schema is not None else "",
            }
        )

    def clean_schema(self) -> Any:
        raw = self.cleaned_data["schema"].strip()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"Not JSON: {exc}") from None

    def definition(self) -> dict[str, Any]:
        data = dict(self.cleaned_data)
        data.pop("name", None)
        data["default_category"] = data["default_category"] or None
        return data


def _list_context(request: ConsoleRequest, form: KindForm | None = None) -> dict[str, Any]:
    registry = kind_registry.registry(request.tenant)
    counts = kind_changes.kind_counts(tenant=request.tenant)
    rows = [
        {
            "kind": kind,
            "count": counts.get(kind.name, 0),
            "tool": kind_registry.tool_name(kind.name) if kind.schema is not None else None,
        }
        for kind in registry.kinds
    ]
    labels = sorted((name, n) for name, n in counts.items() if name not in registry.rules)
    return {
        "section": "kinds",
        "rows": rows,
        "labels": labels,
        "form": form or KindForm(initial={"cardinality": "multiple", "memory_type": "semantic"}),
    }


@require_role(Role.VIEWER)
@service_errors(back=lambda: reverse("console:kinds"))
def kind_list(request: ConsoleRequest) -> HttpResponse:
    """The tenant's kinds with their live counts, and (admins) a form for a new one."""
    if request.method == "POST":
        if not request.membership.has_role(Role.ADMIN):
            raise PermissionDenied
        form = KindForm(request.POST)
        if form.is_valid():
            try:
                kind, _ = kind_changes.kind_save(
                    tenant=request.tenant, name=form.cleaned_data["name"], data=form.definition()
                )
            except DomainError as exc:
                refuse_on_form(form, exc)
            else:
                return done(
                    request, f"Kind {kind.name} saved.", reverse("console:kind", args=[kind.name])
                )
        return render(request, "console/kinds.html", _list_context(request, form), status=422)
    return render(request, "console/kinds.html", _list_context(request))


@require_role(Role.VIEWER)
@service_errors(back=lambda name: reverse("console:kinds"))
def kind_detail(request: ConsoleRequest, name: str) -> HttpResponse:
    """One kind: its definition, editable by admins (the name stays)."""
    kind = kind_changes.kind_get(tenant=request.tenant, name=name)
    form = KindForm.of(kind)
    status = 200
    if request.method == "POST":
        if not request.membership.has_role(Role.ADMIN):
            raise PermissionDenied
        post = request.POST.copy()
        post["name"] = kind.name  # the name stays
        form = KindForm(post)
        if form.is_valid():
            try:
                kind_changes.kind_save(
                    tenant=request.tenant, name=kind.name, data=form.definition()
                )
            except DomainError as exc:
                refuse_on_form(form, exc)
            else:
                return done(
                    request, f"Kind {kind.name} saved.", reverse("console:kind", args=[name])
                )
        status = 422
    counts = kind_changes.kind_counts(tenant=request.tenant)
    context = {
        "section": "kinds",
        "kind": kind,
        "count": counts.get(kind.name, 0),
        "tool": kind_registry.tool_name(kind.name) if kind.schema is not None else None,
        "form": form,
    }
    return render(request, "console/kind_detail.html", context, status=status)


@require_role(Role.ADMIN)
@require_POST
@service_errors(back=lambda name: reverse("console:kind", args=[name]))
def kind_delete_view(request: ConsoleRequest, name: str) -> HttpResponse:
    kind_changes.kind_delete(tenant=request.tenant, name=name)
    return done(request, f"Kind {name} deleted.", reverse("console:kinds"))


@require_role(Role.VIEWER)
@service_errors(back=lambda: reverse("console:tenant"))
def tenant_settings(request: ConsoleRequest) -> HttpResponse:
    """The tenant's memory policy: the cap of user memories per subject, retention."""
    tenant = request.tenant
    form = TenantPolicyForm(
        initial={"user_cap": tenant.user_cap, "max_retention": retention_text(tenant.max_retention)}
    )
    status = 200
    if request.method == "POST":
        if not request.membership.has_role(Role.ADMIN):
            raise PermissionDenied
        form = TenantPolicyForm(request.POST)
        if form.is_valid():
            try:
                tenant_policy_set(tenant=tenant, **form.cleaned_data)
            except DomainError as exc:
                refuse_on_form(form, exc)
            else:
                return done(request, "Tenant policy saved.", reverse("console:tenant"))
        status = 422
    context = {"section": "tenant", "form": form, "policy": tenant.policy()}
    return render(request, "console/tenant.html", context, status=status)


def data_rows(memory: Memory, registry: kind_registry.Registry) -> list[dict[str, Any]]:
    """A memory's `data` as its kind's schema fields: one row per property of the
    schema (name, type, description, the value or none), then the fields the schema does not
    name. Empty for a memory without data."""
    data = memory.data if isinstance(memory.data, dict) else None
    if data is None:
        return []
    kind = next((k for k in registry.kinds if k.name == memory.kind), None)
    properties = ((kind.schema or {}).get("properties") or {}) if kind is not None else {}
    required = set((kind.schema or {}).get("required") or []) if kind is not None else set()
    rows = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, dict) else {}
        rows.append(
            {
                "name": name,
                "type": _type(spec),
                "description": spec.get("description", ""),
                "required": name in required,
                "present": name in data,
                "value": _shown(data.get(name)),
            }
        )
    for name, value in data.items():
        if name not in properties:
            rows.append(
                {
                    "name": name,
                    "type": "",
                    "description": "",
                    "required": False,
                    "present": True,
                    "value": _shown(value),
                    "extra": bool(properties),
                }
            )
    return rows


def _type(spec: dict) -> str:
    declared = spec.get("type")
    if isinstance(declared, list):
        return " | ".join(str(t) for t in declared)
    return str(declared or "")


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

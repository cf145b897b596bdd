"""Django admin: an operator's escape hatch. Read-mostly; key hashes are never editable."""

from __future__ import annotations

from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.models import Agent, ApiKey, Membership, Tenant
from accounts.services import api_key_revoke


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    """Name, caps and daily extraction token budget are editable. Tenants come from `create_api_key` /
    `create_operator` (no add here), and deleting one would cascade over every memory and
    revision without a purge record (no delete either). The retention policy changes through
    `tenant_policy` or the console, which recompute the memories' expiry; the kind registry's
    version only with the registry."""

    list_display = ("slug", "name", "workspace_cap", "extraction_daily_token_budget", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("slug", "max_retention", "kinds_version", "created_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Tenant | None = None) -> bool:
        return False


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("user", "tenant")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "tenant", "entry_cap", "hydration_budget_bytes", "default_category")
    list_filter = ("tenant",)
    # Changed through `agent_policy` or the console, which recompute the memories' expiry.
    readonly_fields = ("max_retention",)
    list_select_related = ("tenant",)
    filter_horizontal = ("reads_from",)


class ApiKeyForm(forms.ModelForm):
    class Meta:
        model = ApiKey
        fields = ("name", "expires_at")

    def clean_expires_at(self) -> datetime | None:
        """A key's life may be shortened, never lengthened: a later or cleared expiry on a key
        that has one would bring back a key someone chose to end."""
        expires_at: datetime | None = self.cleaned_data["expires_at"]
        current = self.instance.expires_at
        if current is not None and (expires_at is None or expires_at > current):
            raise forms.ValidationError("An expiry can only be moved earlier.")
        return expires_at


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    form = ApiKeyForm
    list_display = (
        "prefix",
        "agent",
        "tenant",
        "scopes",
        "subject_id",
        "created_at",
        "expires_at",
        "revoked_at",
        "last_used_at",
    )
    list_filter = ("tenant",)
    list_select_related = ("agent", "tenant")
    # The escape hatch is revoking (the action below) or shortening a key; what it is, whose
    # it is and what it may do stay as created, and a revocation is final. Revoked rather than
    # deleted, so `last_used_at` stays on record.
    readonly_fields = (
        "tenant",
        "agent",
        "prefix",
        "key_hash",
        "scopes",
        "subject_id",
        "created_by",
        "created_at",
        "revoked_at",
        "last_used_at",
    )
    actions = ("revoke_selected",)

    @admin.action(description="Revoke selected keys")
    def revoke_selected(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        already = 0
        keys = list(queryset)
        for key in keys:
            already += key.revoked_at is not None
            api_key_revoke(tenant=key.tenant, key_id=key.pk)
        revoked = len(keys) - already
        noun = "key" if revoked == 1 else "keys"
        self.message_user(
            request, f"Revoked {revoked} {noun} ({already} already revoked).", messages.SUCCESS
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A key added here would have no secret and no hash: keys come from the console's
        # `Create key` or `manage.py create_api_key`, which show the key once.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: ApiKey | None = None) -> bool:
        return False

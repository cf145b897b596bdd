"""Django admin: an operator's escape hatch. Read-mostly; key hashes are never editable."""

from django.contrib import admin

from accounts.models import Agent, ApiKey, Membership, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "workspace_cap", "created_at")
    search_fields = ("slug", "name")


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("user", "tenant", "role", "created_at")
    list_filter = ("role",)
    list_select_related = ("user", "tenant")


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("slug", "tenant", "entry_cap", "hydration_budget_bytes", "default_category")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    filter_horizontal = ("reads_from",)


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
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
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")

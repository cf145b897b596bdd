"""Django admin: an operator's escape hatch. Read-mostly; key hashes are never editable."""

from django.contrib import admin

from accounts.models import Agent, ApiKey, Membership, Tenant


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    """Name and workspace cap are editable. Tenants come from `create_api_key` /
    `create_operator` (no add here), and deleting one would cascade over every memory and
    revision without a purge record (no delete either)."""

    list_display = ("slug", "name", "workspace_cap", "created_at")
    search_fields = ("slug", "name")
    readonly_fields = ("slug", "created_at")

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
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
    # The escape hatch is revoking (or shortening) a key; what it is, whose it is and what it
    # may do stay as created. Revoked rather than deleted, so `last_used_at` stays on record.
    readonly_fields = (
        "tenant",
        "agent",
        "prefix",
        "key_hash",
        "scopes",
        "subject_id",
        "created_by",
        "created_at",
        "last_used_at",
    )

    def has_add_permission(self, request):
        # A key added here would have no secret and no hash: keys come from the console's
        # `Create key` or `manage.py create_api_key`, which show the key once.
        return False

    def has_delete_permission(self, request, obj=None):
        return False

"""Django admin for memories and their history: read-only (changes go through the services)."""

from django.contrib import admin

from memories.models import IdempotencyRecord, JobRun, Memory, MemoryRevision, OwnerCount


class ReadOnlyAdmin(admin.ModelAdmin):
    """View only: memories change through the services (one revision per change), revisions are
    append-only, owner counts are kept by triggers. A delete here would bypass all of that."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Memory)
class MemoryAdmin(ReadOnlyAdmin):
    list_display = ("id", "tenant", "agent", "category", "key", "status", "version", "updated_at")
    list_filter = ("status", "category", "review_state")
    list_select_related = ("tenant", "agent")
    search_fields = ("id", "key")
    exclude = ("embedding",)


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = ("memory_id", "tenant", "version", "actor", "change_type", "created_at")
    list_filter = ("change_type",)
    list_select_related = ("tenant",)


@admin.register(IdempotencyRecord)
class IdempotencyRecordAdmin(ReadOnlyAdmin):
    list_display = ("key_digest", "tenant", "response_status", "created_at")

    def has_delete_permission(self, request, obj=None):
        return True  # dropping a stored response only makes the next retry run again


@admin.register(OwnerCount)
class OwnerCountAdmin(ReadOnlyAdmin):
    """Active memories per owner (owner 0: the tenant's workspace), as the cap check sees them."""

    list_display = ("tenant_id", "owner_id", "active")
    list_filter = ("tenant_id",)
    ordering = ("tenant_id", "owner_id")


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = ("job", "trigger", "status", "started_at", "duration_ms", "dry_run")
    list_filter = ("job", "status")

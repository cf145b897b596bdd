"""Django admin for memories and their history: read-only (changes go through the services)."""

from django.contrib import admin

from memories.models import IdempotencyRecord, JobRun, Memory, MemoryRevision


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
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
    list_display = ("key", "tenant", "response_status", "created_at")


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = ("job", "trigger", "status", "started_at", "duration_ms", "dry_run")
    list_filter = ("job", "status")

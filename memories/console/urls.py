from django.urls import path

from memories.console import (
    agents,
    kind_pages,
    memories,
    pages,
    subjects,
    thread_pages,
    webhooks,
)

app_name = "console"

urlpatterns = [
    path("", pages.dashboard, name="dashboard"),
    path("memories/", memories.memory_list_view, name="memories"),
    path("memories/bulk/", memories.memory_bulk, name="memory-bulk"),
    path("memories/<str:memory_id>/", memories.memory_detail, name="memory-detail"),
    path("memories/<str:memory_id>/save/", memories.memory_save, name="memory-save"),
    path(
        "memories/<str:memory_id>/tombstone/",
        memories.memory_tombstone_view,
        name="memory-tombstone",
    ),
    path("memories/<str:memory_id>/restore/", memories.memory_restore_view, name="memory-restore"),
    path("memories/<str:memory_id>/purge/", memories.memory_purge_view, name="memory-purge"),
    path("memories/<str:memory_id>/approve/", memories.memory_approve_view, name="memory-approve"),
    path("memories/<str:memory_id>/merge/", memories.memory_merge_view, name="memory-merge"),
    path("subjects/<path:subject_id>/", subjects.subject_detail, name="subject"),
    path("subject-erasure/", subjects.subject_erase_view, name="subject-erase"),
    path("threads/", thread_pages.thread_list, name="threads"),
    path("threads/<int:thread_pk>/", thread_pages.thread_detail, name="thread"),
    path(
        "threads/<int:thread_pk>/extract/", thread_pages.thread_extract_view, name="thread-extract"
    ),
    path("review/", memories.review_queue, name="review"),
    path("tombstones/", memories.tombstones, name="tombstones"),
    path("activity/", memories.activity, name="activity"),
    path("export/", pages.export_page, name="export"),
    path("export/markdown/", pages.export_markdown_view, name="export-markdown"),
    path("export/jsonl/", pages.export_jsonl_view, name="export-jsonl"),
    path("export/tenant/", pages.export_tenant_view, name="export-tenant"),
    path("export/import/", pages.import_view, name="import"),
    path("agents/", agents.agent_list, name="agents"),
    path("extraction-budget/", agents.extraction_budget, name="extraction-budget"),
    path("agents/<slug:slug>/", agents.agent_detail, name="agent"),
    path("agents/<slug:slug>/keys/", agents.key_create, name="key-create"),
    path("keys/<int:key_id>/revoke/", agents.key_revoke, name="key-revoke"),
    path("kinds/", kind_pages.kind_list, name="kinds"),
    path("kinds/<str:name>/", kind_pages.kind_detail, name="kind"),
    path("kinds/<str:name>/delete/", kind_pages.kind_delete_view, name="kind-delete"),
    path("tenant/", kind_pages.tenant_settings, name="tenant"),
    path("jobs/", pages.jobs, name="jobs"),
    path("jobs/run/", pages.job_run, name="job-run"),
    path("members/", pages.members, name="members"),
    path("webhooks/", webhooks.webhook_list_view, name="webhooks"),
    path("webhooks/add/", webhooks.webhook_create_view, name="webhook-create"),
    path("webhooks/<str:webhook_id>/", webhooks.webhook_detail, name="webhook"),
    path("webhooks/<str:webhook_id>/delete/", webhooks.webhook_delete_view, name="webhook-delete"),
    path("webhooks/<str:webhook_id>/enable/", webhooks.webhook_enable_view, name="webhook-enable"),
    path(
        "deliveries/<int:delivery_id>/resend/",
        webhooks.delivery_resend_view,
        name="delivery-resend",
    ),
]

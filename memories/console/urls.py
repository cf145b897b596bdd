from django.urls import path

from memories.console import agents as a
from memories.console import kinds as k
from memories.console import memories as m
from memories.console import pages as p
from memories.console import subjects as s
from memories.console import threads as t
from memories.console import webhooks as w

app_name = "console"

urlpatterns = [
    path("", p.dashboard, name="dashboard"),
    path("memories/", m.memory_list, name="memories"),
    path("memories/bulk/", m.memory_bulk, name="memory-bulk"),
    path("memories/<str:memory_id>/", m.memory_detail, name="memory-detail"),
    path("memories/<str:memory_id>/save/", m.memory_save, name="memory-save"),
    path("memories/<str:memory_id>/tombstone/", m.memory_tombstone, name="memory-tombstone"),
    path("memories/<str:memory_id>/restore/", m.memory_restore, name="memory-restore"),
    path("memories/<str:memory_id>/purge/", m.memory_purge, name="memory-purge"),
    path("memories/<str:memory_id>/approve/", m.memory_approve, name="memory-approve"),
    path("memories/<str:memory_id>/merge/", m.memory_merge, name="memory-merge"),
    path("subjects/<path:subject_id>/", s.subject_detail, name="subject"),
    path("subject-erasure/", s.subject_erase, name="subject-erase"),
    path("threads/", t.thread_list, name="threads"),
    path("threads/<int:thread_pk>/", t.thread_detail, name="thread"),
    path("threads/<int:thread_pk>/extract/", t.thread_extract, name="thread-extract"),
    path("review/", m.review_queue, name="review"),
    path("tombstones/", m.tombstones, name="tombstones"),
    path("activity/", m.activity, name="activity"),
    path("export/", p.export_page, name="export"),
    path("export/markdown/", p.export_markdown_view, name="export-markdown"),
    path("export/jsonl/", p.export_jsonl_view, name="export-jsonl"),
    path("export/import/", p.import_view, name="import"),
    path("agents/", a.agent_list, name="agents"),
    path("extraction-budget/", a.extraction_budget, name="extraction-budget"),
    path("agents/<slug:slug>/", a.agent_detail, name="agent"),
    path("agents/<slug:slug>/keys/", a.key_create, name="key-create"),
    path("keys/<int:key_id>/revoke/", a.key_revoke, name="key-revoke"),
    path("kinds/", k.kind_list, name="kinds"),
    path("kinds/<str:name>/", k.kind_detail, name="kind"),
    path("kinds/<str:name>/delete/", k.kind_delete, name="kind-delete"),
    path("tenant/", k.tenant_settings, name="tenant"),
    path("jobs/", p.jobs, name="jobs"),
    path("jobs/run/", p.job_run, name="job-run"),
    path("members/", p.members, name="members"),
    path("webhooks/", w.webhook_list, name="webhooks"),
    path("webhooks/add/", w.webhook_create, name="webhook-create"),
    path("webhooks/<str:webhook_id>/", w.webhook_detail, name="webhook"),
    path("webhooks/<str:webhook_id>/delete/", w.webhook_delete, name="webhook-delete"),
    path("webhooks/<str:webhook_id>/enable/", w.webhook_enable, name="webhook-enable"),
    path("deliveries/<int:delivery_id>/resend/", w.delivery_resend, name="delivery-resend"),
]

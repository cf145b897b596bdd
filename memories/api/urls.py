from django.urls import path

from memories.api import views
from memories.api.event_views import EventsView, WebhookDetailView, WebhooksView
from memories.api.export_views import ExportMarkdownView
from memories.api.index import ApiIndexView
from memories.api.kind_views import KindsView, KindView
from memories.api.retrieval_views import HydrateView, SearchView
from memories.api.subject_views import SubjectView
from memories.api.thread_views import (
    ThreadDetailView,
    ThreadEndView,
    ThreadExtractView,
    ThreadMessagesView,
)

urlpatterns = [
    path("", ApiIndexView.as_view(), name="api-index"),
    path("whoami", views.WhoAmIView.as_view(), name="api-whoami"),
    path("memories", views.MemoriesView.as_view(), name="api-memories"),
    path("memories/by-key/<path:key>", views.MemoryByKeyView.as_view(), name="api-memory-by-key"),
    path("memories/<str:memory_id>", views.MemoryDetailView.as_view(), name="api-memory"),
    path(
        "memories/<str:memory_id>/confirm",
        views.MemoryConfirmView.as_view(),
        name="api-memory-confirm",
    ),
    path("keys", views.KeysView.as_view(), name="api-keys"),
    path("kinds", KindsView.as_view(), name="api-kinds"),
    path("kinds/<str:name>", KindView.as_view(), name="api-kind"),
    path("search", SearchView.as_view(), name="api-search"),
    path("hydrate", HydrateView.as_view(), name="api-hydrate"),
    path("export.md", ExportMarkdownView.as_view(), name="api-export-md"),
    # `<path:thread_id>` takes slashes too: the suffixed routes must come before the bare one.
    path(
        "threads/<path:thread_id>/messages",
        ThreadMessagesView.as_view(),
        name="api-thread-messages",
    ),
    path(
        "threads/<path:thread_id>/extract", ThreadExtractView.as_view(), name="api-thread-extract"
    ),
    path("threads/<path:thread_id>/end", ThreadEndView.as_view(), name="api-thread-end"),
    path("threads/<path:thread_id>", ThreadDetailView.as_view(), name="api-thread"),
    path("subjects/<path:subject_id>", SubjectView.as_view(), name="api-subject"),
    path("events", EventsView.as_view(), name="api-events"),
    path("webhooks", WebhooksView.as_view(), name="api-webhooks"),
    path("webhooks/<str:webhook_id>", WebhookDetailView.as_view(), name="api-webhook"),
]

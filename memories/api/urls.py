from django.urls import path

from memories.api import views
from memories.api.export import ExportMarkdownView

urlpatterns = [
    path("whoami", views.WhoAmIView.as_view(), name="api-whoami"),
    path("export.md", ExportMarkdownView.as_view(), name="api-export-md"),
]

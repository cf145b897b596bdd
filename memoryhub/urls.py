from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from memories.scrape import metrics_view
from memoryhub.health import healthz

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/v1/", include("memories.api.urls")),
    path("accounts/", include("accounts.urls")),
    path("console/", include("memories.console.urls")),
]

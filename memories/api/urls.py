from django.urls import path

from memories.api import views

urlpatterns = [
    path("whoami", views.WhoAmIView.as_view(), name="api-whoami"),
]

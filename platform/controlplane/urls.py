from django.contrib import admin
from django.urls import include, path

from controlplane.telemetry.views import health

handler404 = "controlplane.api.exceptions.not_found"

urlpatterns = [
    path("health", health, name="health"),
    path("django-admin/", admin.site.urls),
    path("api/", include("controlplane.api.urls")),
    path("", include("controlplane.web.urls")),
]

from django.contrib import admin
from django.urls import include, path

from controlplane.benchmarks.metrics import metrics
from controlplane.telemetry.views import health

handler404 = "controlplane.api.exceptions.not_found"

urlpatterns = [
    path("health", health, name="health"),
    path("metrics", metrics, name="metrics"),  # benchmark regression verdicts, for Prometheus
    path("django-admin/", admin.site.urls),
    path("api/", include("controlplane.api.urls")),
    path("", include("controlplane.web.pages.urls")),
    path("", include("controlplane.web.urls")),
]

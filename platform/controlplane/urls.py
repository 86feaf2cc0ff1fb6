from django.contrib import admin
from django.urls import include, path

from controlplane.telemetry.metrics import metrics
from controlplane.telemetry.views import health

handler404 = "controlplane.api.exceptions.not_found"

urlpatterns = [
    path("health", health, name="health"),
    path("metrics", metrics, name="metrics"),  # Django, Celery queues, benchmark verdicts: Prometheus
    path("django-admin/", admin.site.urls),
    path("api/", include("controlplane.api.urls")),
    path("", include("controlplane.web.pages.urls")),
    path("", include("controlplane.web.urls")),
]

from django.contrib import admin
from django.urls import path

from controlplane.telemetry.views import health

urlpatterns = [
    path("health", health, name="health"),
    path("django-admin/", admin.site.urls),
]

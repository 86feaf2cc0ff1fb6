"""/api/v1/: every app's router, plus users and the audit log; /api/schema/ and /api/docs/."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlplane.api.routing import router_urls
from controlplane.api.views import ApiTokenViewSet, AuditEntryViewSet, UserViewSet

urlpatterns = [
    path(
        "v1/",
        include(
            router_urls(
                {"users": UserViewSet, "api-tokens": ApiTokenViewSet, "audit-entries": AuditEntryViewSet}
            )
        ),
    ),
    path("v1/", include("controlplane.fleet.api.urls")),
    path("v1/", include("controlplane.checkpoints.api.urls")),
    path("v1/", include("controlplane.serving.api.urls")),
    path("v1/", include("controlplane.benchmarks.api.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path(
        "docs/",
        # The split view serves Swagger UI's init script as a file: the CSP allows no inline script.
        SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/swagger_ui.html"),
        name="api-docs",
    ),
]

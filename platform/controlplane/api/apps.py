from django.apps import AppConfig


class ApiConfig(AppConfig):
    """Shared REST plumbing: roles, bearer tokens, base viewsets, the audit log and users."""

    name = "controlplane.api"
    label = "api"
    verbose_name = "Admin API"

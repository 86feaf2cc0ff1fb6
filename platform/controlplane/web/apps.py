from django.apps import AppConfig


class WebConfig(AppConfig):
    """The operator UI: Django templates + htmx over the same models and services as the API."""

    name = "controlplane.web"
    label = "web"
    verbose_name = "Operator UI"

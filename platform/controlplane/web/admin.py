"""Every model of a Chassis app that its own admin.py leaves unregistered still shows in the Django
admin, with Django's defaults. ``web`` comes after the other Chassis apps in INSTALLED_APPS, so their
admin modules have run when this one does."""

from django.apps import apps
from django.contrib import admin

CHASSIS_APPS = ("api", "fleet", "checkpoints", "serving", "benchmarks", "telemetry")

for config in apps.get_app_configs():
    if config.label in CHASSIS_APPS:
        for model in config.get_models():
            if not admin.site.is_registered(model):
                admin.site.register(model)

"""The Django admin lists every Chassis model, and its pages open for a superuser."""

import pytest
from django.apps import apps
from django.contrib import admin

pytestmark = pytest.mark.django_db


def test_every_chassis_model_is_registered_and_its_list_opens(admin_client, make_node):
    make_node("n1", count=1)
    models = [model for label in ("api", "fleet", "checkpoints", "serving", "benchmarks")
              for model in apps.get_app_config(label).get_models()]  # fmt: skip
    assert models and all(admin.site.is_registered(model) for model in models)
    for model in models:
        url = f"/django-admin/{model._meta.app_label}/{model._meta.model_name}/"
        assert admin_client.get(url).status_code == 200, url

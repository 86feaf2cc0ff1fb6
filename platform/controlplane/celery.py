"""The control plane's Celery application: ``celery -A controlplane worker``."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Task outcome and duration metrics, counted by Celery signals in whichever process runs a task.
import controlplane.telemetry.celery_metrics  # noqa: E402, F401

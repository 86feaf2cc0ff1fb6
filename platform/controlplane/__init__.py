"""Chassis control plane (Django project package)."""

from controlplane.celery import app as celery_app

__all__ = ["celery_app"]

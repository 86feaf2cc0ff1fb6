from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from controlplane.benchmarks.models.parameters import LoadParameters
from controlplane.named_resource import NamedResource

MAX_INTERVAL_MINUTES = 7 * 24 * 60


class BenchmarkSchedule(NamedResource, LoadParameters):
    """Reproduce the same benchmark every ``interval_minutes`` so a regression shows up as a trend."""

    # A deleted deployment disables its schedules (benchmarks/signals.py); they stay, with their runs.
    deployment = models.ForeignKey(
        "serving.Deployment", null=True, on_delete=models.SET_NULL, related_name="benchmark_schedules"
    )
    deployment_name = models.CharField(max_length=100, blank=True, editable=False)
    interval_minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(MAX_INTERVAL_MINUTES)]
    )
    enabled = models.BooleanField(default=True)
    starts_at = models.DateTimeField(default=timezone.now, help_text="Slots are starts_at + k × interval.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    def save(self, *args, **kwargs):
        if self.deployment is not None:
            self.deployment_name = self.deployment.name
        super().save(*args, **kwargs)

    def slot_at(self, now: datetime) -> datetime | None:
        """The latest slot not after ``now`` (None before the first one)."""
        if now < self.starts_at:
            return None
        interval = timedelta(minutes=self.interval_minutes)
        return self.starts_at + interval * ((now - self.starts_at) // interval)

    def next_slot(self, now: datetime) -> datetime:
        current = self.slot_at(now)
        return self.starts_at if current is None else current + timedelta(minutes=self.interval_minutes)

    def set_enabled(self, enabled: bool) -> None:
        if enabled and self.deployment_id is None:
            raise ValidationError(
                {"enabled": [f"deployment {self.deployment_name} was deleted; nothing to run on"]}
            )
        self.enabled = enabled
        self.save(update_fields=["enabled", "updated"])

    def stop_for_deleted_deployment(self) -> None:
        self.enabled = False
        self.save(update_fields=["enabled", "updated"])

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from controlplane.fleet.choices import Vendor
from controlplane.named_resource import NamedResource
from controlplane.serving.choices import PlacementStatus, Role, RoutingPolicy

MAX_REPLICAS = 256


class Deployment(NamedResource):
    """Desired state: N replicas of a checkpoint with engine options, on accelerators of one vendor."""

    served_model_name = models.CharField(
        max_length=128, blank=True, help_text="Defaults to the deployment name."
    )
    checkpoint = models.ForeignKey(
        "checkpoints.Checkpoint", on_delete=models.PROTECT, related_name="deployments"
    )
    engine_options = models.JSONField(
        default=dict, blank=True, help_text='Extra `chassis serve` flags, e.g. {"max_num_seqs": 64}.'
    )
    replicas = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(MAX_REPLICAS)])
    tp_size = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(64)]
    )
    vendor = models.CharField(max_length=16, choices=Vendor.choices, default=Vendor.CPU)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MIXED)
    routing_policy = models.CharField(
        max_length=16, choices=RoutingPolicy.choices, default=RoutingPolicy.CACHE_AWARE
    )
    placement_status = models.CharField(
        max_length=16, choices=PlacementStatus.choices, default=PlacementStatus.OK
    )
    placement_reason = models.CharField(max_length=300, blank=True)

    def save(self, *args, **kwargs):
        if not self.served_model_name:
            self.served_model_name = self.name
        super().save(*args, **kwargs)

    def scale(self, replicas: int) -> None:
        if not 0 <= replicas <= MAX_REPLICAS:
            raise ValidationError({"replicas": f"must be between 0 and {MAX_REPLICAS}"})
        self.replicas = replicas
        self.save(update_fields=["replicas", "updated"])

    def mark_unschedulable(self, reason: str) -> None:
        if (self.placement_status, self.placement_reason) != (PlacementStatus.UNSCHEDULABLE, reason):
            self.placement_status, self.placement_reason = PlacementStatus.UNSCHEDULABLE, reason
            self.save(update_fields=["placement_status", "placement_reason", "updated"])

    def mark_schedulable(self) -> None:
        if self.placement_status != PlacementStatus.OK:
            self.placement_status, self.placement_reason = PlacementStatus.OK, ""
            self.save(update_fields=["placement_status", "placement_reason", "updated"])

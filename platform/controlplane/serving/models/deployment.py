from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction

from controlplane.checkpoints.choices import CheckpointState
from controlplane.fleet.choices import Vendor
from controlplane.named_resource import NamedResource
from controlplane.serving.choices import PlacementStatus, Role, RolloutStatus, RoutingPolicy
from controlplane.serving.launcher import size_errors
from controlplane.serving.models.run_spec import SPEC_FIELDS, RunSpec

MAX_REPLICAS = 256


class Deployment(RunSpec, NamedResource):
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
    ep_size = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Expert parallelism: the ranks a mixture-of-experts replica spans, its routed experts "
        "split over them; equals dp_size, and above 1 needs tp_size 1. A replica holds tp_size × "
        "ep_size accelerators.",
    )
    dp_size = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Data-parallel attention inside an expert-parallel replica: each rank its own requests "
        "and KV cache; equals ep_size.",
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
    revision = models.ForeignKey(
        "serving.DeploymentRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The revision every replica should run; others are replaced by a rolling update.",
    )
    rollout_status = models.CharField(
        max_length=16, choices=RolloutStatus.choices, default=RolloutStatus.COMPLETE
    )
    rollout_reason = models.TextField(blank=True)

    def clean(self):
        """The replica sizes with the engine options and role: as ``chassis serve`` would take them."""
        super().clean()
        sizes = {"tp_size": self.tp_size, "ep_size": self.ep_size, "dp_size": self.dp_size}
        errors = size_errors(self.engine_options, **sizes, role=self.role)
        if errors:
            raise ValidationError(errors)

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

    # --- revisions and rollouts ---------------------------------------------------------------
    def record_revision(self, actor: str) -> bool:
        """A new revision when the checkpoint, engine options or TP/EP/DP sizes differ from the current
        one; True when one was made (a rolling update to it follows)."""
        from controlplane.serving.models.revision import DeploymentRevision

        if self.revision_id is not None and self.revision.spec() == self.spec():
            return False
        with transaction.atomic():
            last = self.revisions.aggregate(models.Max("number"))["number__max"] or 0
            revision = DeploymentRevision.objects.create(
                deployment=self, number=last + 1, created_by=actor,
                **dict(zip(SPEC_FIELDS, self.spec(), strict=True)),
            )  # fmt: skip
            self._target(revision, f"rolling out revision {revision.number}")
        return True

    def roll_back(self, revision) -> None:
        """Target an earlier revision again: its settings become the deployment's."""
        if revision.deployment_id != self.pk:
            raise ValidationError({"revision": f"{revision} is not a revision of {self}"})
        if revision.pk == self.revision_id and self.rollout_status != RolloutStatus.FAILED:
            raise ValidationError({"revision": f"{revision} is already the current revision"})
        if revision.checkpoint.state != CheckpointState.READY:
            raise ValidationError(
                {
                    "revision": f"its checkpoint {revision.checkpoint} is {revision.checkpoint.state}, not ready"
                }
            )
        for name, value in zip(SPEC_FIELDS, revision.spec(), strict=True):
            setattr(self, name, value)
        self._target(revision, f"rolling back to revision {revision.number}")

    def _target(self, revision, reason: str) -> None:
        first = self.revision_id is None
        self.revision = revision
        self.rollout_status = RolloutStatus.COMPLETE if first else RolloutStatus.PROGRESSING
        self.rollout_reason = "" if first else reason
        self.save()

    def mark_rollout(self, status: str, reason: str) -> None:
        if (self.rollout_status, self.rollout_reason) != (status, reason):
            self.rollout_status, self.rollout_reason = status, reason
            self.save(update_fields=["rollout_status", "rollout_reason", "updated"])

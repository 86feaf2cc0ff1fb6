from django.db import models

from controlplane.serving.models.run_spec import RunSpec


class DeploymentRevision(RunSpec, models.Model):
    """One version of what a deployment's replicas run; a new one each time that changes."""

    deployment = models.ForeignKey("serving.Deployment", on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    checkpoint = models.ForeignKey(
        "checkpoints.Checkpoint", on_delete=models.PROTECT, related_name="deployment_revisions"
    )
    engine_options = models.JSONField(default=dict, blank=True)
    tp_size = models.PositiveSmallIntegerField(default=1)
    ep_size = models.PositiveSmallIntegerField(default=1)
    dp_size = models.PositiveSmallIntegerField(default=1)
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=160, blank=True)

    class Meta:
        ordering = ["deployment", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "number"], name="unique_revision_number")
        ]

    def __str__(self) -> str:
        return f"revision {self.number}"

    @property
    def dtype(self) -> str | None:
        return self.engine_options.get("dtype")

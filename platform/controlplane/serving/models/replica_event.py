from django.db import models

from controlplane.serving.choices import ReplicaState


class ReplicaEvent(models.Model):
    """One state transition of a replica: when, from, to, why and who."""

    replica = models.ForeignKey("serving.Replica", on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    from_state = models.CharField(max_length=16, choices=ReplicaState.choices, blank=True)
    to_state = models.CharField(max_length=16, choices=ReplicaState.choices)
    reason = models.TextField(blank=True)
    actor = models.CharField(max_length=160)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.replica} {self.from_state or '-'} -> {self.to_state}: {self.reason}"

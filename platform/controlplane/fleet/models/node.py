from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from controlplane.fleet.choices import ENGINE_DEVICE, NODE_TRANSITIONS, NodeState

log = logging.getLogger(__name__)


class Node(models.Model):
    domain = models.ForeignKey("fleet.ScaleUpDomain", on_delete=models.PROTECT, related_name="nodes")
    name = models.SlugField(max_length=64, unique=True)
    hostname = models.CharField(max_length=255, blank=True)
    address = models.CharField(
        max_length=255, default="127.0.0.1", help_text="Where its replicas are reached."
    )
    labels = models.JSONField(default=dict, blank=True)
    runtimes = models.JSONField(
        null=True,
        blank=True,
        help_text="Engine devices its agent can drive (cpu, cuda, npu); null until an agent reports them.",
    )
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UP)
    state_reason = models.CharField(max_length=300, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def queue(self) -> str:
        """The Celery queue its agent consumes."""
        return f"node.{self.name}"

    def can_drive(self, vendor: str) -> bool:
        """False when its agent reported the runtimes it has and none drives this vendor's devices."""
        return self.runtimes is None or ENGINE_DEVICE[vendor] in self.runtimes

    def _move(self, to: str, reason: str) -> None:
        if to == self.state:
            return
        if to not in NODE_TRANSITIONS[self.state]:
            raise ValidationError(f"node {self.name} cannot go from {self.state} to {to}")
        log.info("node %s: %s -> %s (%s)", self.name, self.state, to, reason)
        self.state, self.state_reason = to, reason
        self.save(update_fields=["state", "state_reason"])

    def record_heartbeat(self) -> None:
        self.last_heartbeat = timezone.now()
        self.save(update_fields=["last_heartbeat"])
        if self.state == NodeState.LOST:
            self._move(NodeState.UP, "heartbeat resumed")

    def mark_lost(self, reason: str) -> None:
        self._move(NodeState.LOST, reason)

    def cordon(self, reason: str = "cordoned by an operator") -> None:
        self._move(NodeState.CORDONED, reason)

    def uncordon(self) -> None:
        if self.state != NodeState.CORDONED:
            raise ValidationError(f"node {self.name} is {self.state}, not cordoned")
        self._move(NodeState.UP, "uncordoned")

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import timedelta

from django.db import models, transaction
from django.utils import timezone

from controlplane.serving.choices import REPLICA_TRANSITIONS, ReplicaState
from controlplane.serving.models.replica_event import ReplicaEvent


def failure_signature(reason: str) -> str:
    """What makes two failures "the same": their reasons with every number blanked (pids, ports,
    timestamps and line numbers change from one launch to the next; the error does not)."""
    return hashlib.sha256(re.sub(r"\d+", "#", reason).encode()).hexdigest()


class StaleReplicaState(Exception):
    """The replica was not in the state the caller expected: someone else moved it first."""


class Replica(models.Model):
    """One engine process of a deployment. Its state changes only through the methods below."""

    deployment = models.ForeignKey("serving.Deployment", on_delete=models.CASCADE, related_name="replica_set")
    uid = models.UUIDField(
        default=uuid.uuid4, unique=True, editable=False, help_text="Passed as --replica-id."
    )
    ordinal = models.PositiveIntegerField()
    revision = models.ForeignKey(
        "serving.DeploymentRevision",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="replicas",
    )
    replace_requested = models.BooleanField(
        default=False, help_text="Restart asked for: a rolling update replaces it like an outdated one."
    )
    state = models.CharField(max_length=16, choices=ReplicaState.choices, default=ReplicaState.PENDING)
    reason = models.TextField(blank=True, help_text="Why it is in its state (failures keep theirs).")
    state_changed_at = models.DateTimeField(default=timezone.now)
    node = models.ForeignKey(
        "fleet.Node", null=True, blank=True, on_delete=models.SET_NULL, related_name="replicas"
    )
    accelerators = models.ManyToManyField("fleet.Accelerator", blank=True, related_name="replicas")
    host = models.CharField(max_length=255, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    launch_attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(
        null=True, blank=True, help_text="Relaunch backoff after a failure."
    )
    failure_streak = models.PositiveIntegerField(
        default=0, help_text="Failures in a row with the same reason (numbers aside)."
    )
    failure_signature = models.CharField(max_length=64, blank=True)
    relaunch_stopped = models.BooleanField(
        default=False,
        help_text="Gave up after identical failures: no relaunch until a restart, a new revision or a scale change.",
    )
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["deployment__name", "ordinal"]
        constraints = [
            models.UniqueConstraint(fields=["deployment", "ordinal"], name="unique_replica_ordinal")
        ]

    def __str__(self) -> str:
        return f"{self.deployment.name}-{self.ordinal}"

    @property
    def url(self) -> str | None:
        if self.host and self.port:
            host = f"[{self.host}]" if ":" in self.host else self.host
            return f"http://{host}:{self.port}"
        return None

    # --- the one way to change state ------------------------------------------------------------
    def transition(self, to: str, reason: str, actor: str, **fields) -> None:
        """Move from the current state to ``to`` if allowed and nobody moved it meanwhile.

        Raises ``StaleReplicaState`` when the row's state is no longer ``self.state`` (a concurrent
        task won) and ``ValueError`` for a transition the state machine forbids.
        """
        origin = self.state
        if to not in REPLICA_TRANSITIONS[origin]:
            raise ValueError(f"replica {self} cannot go from {origin} to {to}")
        now = timezone.now()
        values = {"state": to, "reason": reason, "state_changed_at": now, **fields}
        with transaction.atomic():
            moved = Replica.objects.filter(pk=self.pk, state=origin).update(**values)
            if not moved:
                current = Replica.objects.filter(pk=self.pk).values_list("state", flat=True).first()
                raise StaleReplicaState(f"replica {self} is {current}, not {origin}")
            ReplicaEvent.objects.create(
                replica=self, from_state=origin, to_state=to, reason=reason, actor=actor
            )
        for key, value in values.items():
            setattr(self, key, value)

    def schedule(self, node, accelerators, actor: str) -> None:
        self.transition(ReplicaState.SCHEDULED, f"placed on {node.name}", actor, node=node, host=node.address)
        self.accelerators.set(accelerators)

    def start_launch(self, port: int, log_path: str, actor: str) -> None:
        self.transition(
            ReplicaState.LAUNCHING,
            f"starting engine on port {port}",
            actor,
            port=port,
            log_path=log_path,
            pid=None,
            launch_attempts=self.launch_attempts + 1,
        )

    def record_process(self, pid: int, port: int) -> bool:
        """Remember the engine process; False when the replica left `launching` meanwhile."""
        updated = Replica.objects.filter(pk=self.pk, state=ReplicaState.LAUNCHING).update(pid=pid, port=port)
        if updated:
            self.pid, self.port = pid, port
        return bool(updated)

    def mark_ready(self, reason: str, actor: str) -> None:
        self.transition(ReplicaState.READY, reason, actor, failure_streak=0, failure_signature="")

    def fail(self, reason: str, actor: str, backoff: timedelta | None = None, give_up_after: int = 0) -> None:
        """``give_up_after``: when this is that many failures in a row with the same reason, the
        replica stays failed (no relaunch) and its reason says so; 0 never gives up."""
        signature = failure_signature(reason)
        streak = self.failure_streak + 1 if signature == self.failure_signature else 1
        give_up = 0 < give_up_after <= streak
        if give_up:
            reason = f"gave up after {streak} identical failures: {reason}"[:2000]
        next_at = timezone.now() + backoff if backoff is not None and not give_up else None
        self.transition(
            ReplicaState.FAILED, reason, actor, next_attempt_at=next_at, failure_streak=streak,
            failure_signature=signature, relaunch_stopped=give_up,
        )  # fmt: skip

    def resume_relaunching(self, reason: str, actor: str) -> None:
        """A replica that gave up is relaunched again (its count of identical failures starts over)."""
        updated = Replica.objects.filter(pk=self.pk, relaunch_stopped=True).update(
            relaunch_stopped=False, failure_streak=0, failure_signature="", next_attempt_at=None
        )
        if updated:
            self.relaunch_stopped, self.failure_streak, self.failure_signature = False, 0, ""
            self.next_attempt_at = None
            ReplicaEvent.objects.create(
                replica=self, from_state=self.state, to_state=self.state, reason=reason, actor=actor
            )

    def drain(self, reason: str, actor: str) -> None:
        self.transition(ReplicaState.DRAINING, reason, actor)

    def stop(self, reason: str, actor: str) -> None:
        self.transition(ReplicaState.STOPPED, reason, actor, pid=None)
        self.accelerators.clear()

    def request_replacement(self, reason: str, actor: str) -> None:
        """Restart without a gap: the rolling update replaces it; it keeps serving meanwhile."""
        Replica.objects.filter(pk=self.pk).update(replace_requested=True)
        self.replace_requested = True
        ReplicaEvent.objects.create(
            replica=self, from_state=self.state, to_state=self.state, reason=reason, actor=actor
        )

    def requeue(self, reason: str, actor: str, fresh_start: bool = False) -> None:
        """failed -> pending: give up the old placement and try again. ``fresh_start`` (an operator's
        restart): its count of identical failures starts over."""
        fresh = {"failure_streak": 0, "failure_signature": "", "relaunch_stopped": False}
        self.transition(
            ReplicaState.PENDING, reason, actor, node=None, host="", port=None, pid=None,
            **(fresh if fresh_start else {}),
        )  # fmt: skip
        self.accelerators.clear()

    def spec(self):
        """What this replica runs: its revision, or the deployment for a replica older than revisions."""
        return self.revision or self.deployment

    @classmethod
    def create_for(cls, deployment, reason: str, actor: str) -> Replica:
        last = cls.objects.filter(deployment=deployment).aggregate(models.Max("ordinal"))["ordinal__max"]
        replica = cls.objects.create(
            deployment=deployment, ordinal=0 if last is None else last + 1, revision=deployment.revision
        )
        ReplicaEvent.objects.create(
            replica=replica, from_state="", to_state=replica.state, reason=reason, actor=actor
        )
        return replica

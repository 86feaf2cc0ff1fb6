"""Drive a deployment's actual replicas toward its desired count (runs on the control-plane queue)."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.serving.choices import ACTIVE_STATES, SCALE_DOWN_ORDER, ReplicaState
from controlplane.serving.conf import setting
from controlplane.serving.dispatch import drain_after_commit, launch_after_commit
from controlplane.serving.models import Deployment, Replica, StaleReplicaState
from controlplane.serving.scheduling import schedule_pending

S = ReplicaState


def _scale_down(replicas: list[Replica], surplus: int, desired: int, actor: str) -> None:
    victims = sorted(replicas, key=lambda r: (SCALE_DOWN_ORDER.index(r.state), -r.ordinal))[:surplus]
    reason = f"scaled down to {desired}"
    for replica in victims:
        if replica.state in (S.FAILED, S.PENDING, S.SCHEDULED):
            replica.stop(reason, actor)
        else:
            replica.drain(reason, actor)
            drain_after_commit(replica.pk, replica.node.queue)


def _relaunch_failed(deployment: Deployment, actor: str) -> None:
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now())
    for replica in deployment.replica_set.filter(due, state=S.FAILED):
        replica.requeue(
            f"relaunch attempt {replica.launch_attempts + 1} after: {replica.reason}"[:2000], actor
        )


def _republish_stale_launches(deployment: Deployment) -> None:
    """A launch message lost with a restarted worker is published again; launching is idempotent."""
    cutoff = timezone.now() - timedelta(seconds=setting("SCHEDULED_STALE_S"))
    for replica in deployment.replica_set.filter(
        state=S.SCHEDULED, state_changed_at__lt=cutoff
    ).select_related("node"):
        if replica.node is not None:
            launch_after_commit(replica.pk, replica.node.queue)


def reconcile_deployment(deployment_id: int, actor: str) -> str | None:
    with transaction.atomic():
        deployment = Deployment.objects.select_for_update().filter(pk=deployment_id).first()
        if deployment is None:
            return None
        replicas = list(deployment.replica_set.filter(state__in=ACTIVE_STATES).select_related("node"))
        surplus = len(replicas) - deployment.replicas
        try:
            if surplus > 0:
                _scale_down(replicas, surplus, deployment.replicas, actor)
            for _ in range(-surplus):
                Replica.create_for(deployment, f"scaling to {deployment.replicas}", actor)
            _relaunch_failed(deployment, actor)
        except StaleReplicaState:
            pass  # a task moved a replica meanwhile; the next pass sees the new state
        _republish_stale_launches(deployment)
    return schedule_pending(deployment, actor)


def reconcile_all(actor: str) -> dict[str, str | None]:
    return {
        name: reconcile_deployment(pk, actor) for pk, name in Deployment.objects.values_list("pk", "name")
    }

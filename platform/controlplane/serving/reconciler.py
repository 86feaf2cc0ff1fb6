"""Drive a deployment's actual replicas toward its desired count and revision (runs on the
control-plane queue); ``rollout`` decides, this module applies the decision to the rows."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from controlplane.serving import rollout
from controlplane.serving.choices import ACTIVE_STATES, ReplicaState, RolloutStatus
from controlplane.serving.conf import setting
from controlplane.serving.dispatch import drain_after_commit, launch_after_commit
from controlplane.serving.models import Deployment, Replica, StaleReplicaState
from controlplane.serving.scheduling import schedule_pending

S = ReplicaState


def _views(deployment: Deployment, replicas: list[Replica]) -> list[rollout.ReplicaView]:
    warm_since = timezone.now() - timedelta(seconds=setting("ROLLOUT_MIN_READY_S"))
    return [
        rollout.ReplicaView(
            id=r.pk,
            ordinal=r.ordinal,
            state=r.state,
            reason=r.reason,
            name=str(r),
            current=r.revision_id == deployment.revision_id and not r.replace_requested,
            available=r.state == S.READY and r.state_changed_at <= warm_since,
        )  # fmt: skip
        for r in replicas
    ]


def _apply(deployment: Deployment, replicas: list[Replica], actor: str) -> None:
    failure = deployment.rollout_reason if deployment.rollout_status == RolloutStatus.FAILED else None
    revision = deployment.revision.number if deployment.revision else None
    decision = rollout.plan(deployment.replicas, _views(deployment, replicas), revision, failure)
    by_id = {r.pk: r for r in replicas}

    def why(replica: Replica) -> str:
        if decision.status == RolloutStatus.FAILED:
            return decision.reason
        if replica.revision_id != deployment.revision_id or replica.replace_requested:
            return f"replaced by a replica of revision {revision} (rolling update)"
        return f"scaled down to {deployment.replicas}"

    for replica_id in decision.stop:
        by_id[replica_id].stop(why(by_id[replica_id]), actor)
    for replica_id in decision.drain:
        replica = by_id[replica_id]
        replica.drain(why(replica), actor)
        drain_after_commit(replica.pk, replica.node.queue)
    for _ in range(decision.create):
        Replica.create_for(deployment, decision.reason or f"scaling to {deployment.replicas}", actor)
    deployment.mark_rollout(decision.status, decision.reason)


def _relaunch_failed(deployment: Deployment, actor: str) -> None:
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=timezone.now())
    for replica in deployment.replica_set.filter(due, state=S.FAILED, relaunch_stopped=False):
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
        replicas = list(
            deployment.replica_set.filter(state__in=ACTIVE_STATES).select_related("node", "deployment")
        )
        try:
            _apply(deployment, replicas, actor)
            _relaunch_failed(deployment, actor)
        except StaleReplicaState:
            pass  # a task moved a replica meanwhile; the next pass sees the new state
        _republish_stale_launches(deployment)
    return schedule_pending(deployment, actor)


def reconcile_all(actor: str) -> dict[str, str | None]:
    return {
        name: reconcile_deployment(pk, actor) for pk, name in Deployment.objects.values_list("pk", "name")
    }

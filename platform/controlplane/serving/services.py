"""Serving operations other apps and the views call; each records who did it."""

from __future__ import annotations

from django.db import transaction

from controlplane.serving.choices import ACTOR_HEARTBEATS, HOLDING_STATES, ReplicaState
from controlplane.serving.conf import relaunch_backoff
from controlplane.serving.dispatch import drain_after_commit, reconcile_after_commit
from controlplane.serving.models import Deployment, Replica, StaleReplicaState


def fail_replicas_on_node(node, reason: str) -> int:
    failed = 0
    for replica in Replica.objects.filter(node=node, state__in=HOLDING_STATES):
        try:
            replica.fail(reason, ACTOR_HEARTBEATS, backoff=relaunch_backoff(replica.launch_attempts))
            failed += 1
        except StaleReplicaState:
            continue
    return failed


@transaction.atomic
def scale(deployment: Deployment, replicas: int) -> None:
    deployment.scale(replicas)
    reconcile_after_commit(deployment.pk)


@transaction.atomic
def drain_replica(replica: Replica, reason: str, actor: str) -> None:
    """Take one replica out gracefully; reconcile starts a replacement if the count still wants it."""
    replica.drain(reason, actor)
    if replica.node is not None:
        drain_after_commit(replica.pk, replica.node.queue)
    reconcile_after_commit(replica.deployment_id)


@transaction.atomic
def drain_deployment(deployment: Deployment) -> int:
    """Scale to zero: every replica drains gracefully."""
    deployment.scale(0)
    reconcile_after_commit(deployment.pk)
    return deployment.replica_set.filter(state__in=(ReplicaState.LAUNCHING, ReplicaState.READY)).count()


@transaction.atomic
def restart_replica(replica: Replica, actor: str) -> None:
    """A failed replica is retried now; a running one drains and reconcile starts a fresh one."""
    if replica.state == ReplicaState.FAILED:
        replica.requeue(f"restart requested by {actor}", actor)
        reconcile_after_commit(replica.deployment_id)
    else:
        drain_replica(replica, f"restart requested by {actor}", actor)


def reconcile_soon(deployment: Deployment) -> None:
    reconcile_after_commit(deployment.pk)

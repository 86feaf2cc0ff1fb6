"""Serving operations other apps and the views call; each records who did it."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from controlplane.serving.choices import ACTOR_HEARTBEATS, ACTOR_RECONCILE, HOLDING_STATES, ReplicaState
from controlplane.serving.conf import relaunch_backoff
from controlplane.serving.dispatch import drain_after_commit, reconcile_after_commit
from controlplane.serving.models import Deployment, DeploymentRevision, Replica, StaleReplicaState

RESTARTABLE_STATES = (ReplicaState.LAUNCHING, ReplicaState.READY, ReplicaState.FAILED)


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
def scale(deployment: Deployment, replicas: int, actor: str = ACTOR_RECONCILE) -> None:
    """A scale change also relaunches replicas that gave up after identical failures."""
    before = deployment.replicas
    deployment.scale(replicas)
    if replicas != before:
        for replica in deployment.replica_set.filter(state=ReplicaState.FAILED, relaunch_stopped=True):
            replica.resume_relaunching(f"replica count changed from {before} to {replicas}", actor)
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
    """A failed replica is retried now; a running one is replaced by a rolling update: a fresh one
    starts, and this one drains only once that one is ready."""
    if replica.state == ReplicaState.FAILED:
        replica.requeue(f"restart requested by {actor}", actor, fresh_start=True)
    else:
        replica.request_replacement(
            f"restart requested by {actor}: replaced once a fresh one is ready", actor
        )
    reconcile_after_commit(replica.deployment_id)


@transaction.atomic
def restart_deployment(deployment: Deployment, actor: str) -> int:
    """Every replica is replaced, one at a time (a rolling restart); returns how many."""
    replicas = list(deployment.replica_set.filter(state__in=RESTARTABLE_STATES))
    for replica in replicas:
        restart_replica(replica, actor)
    return len(replicas)


@transaction.atomic
def save_spec(deployment: Deployment, actor: str) -> bool:
    """After a create or an edit: a new revision when what the replicas run changed (a rolling
    update to it follows). True when there is one."""
    created = deployment.record_revision(actor)
    reconcile_after_commit(deployment.pk)
    return created


@transaction.atomic
def roll_back(deployment: Deployment, number: int | None, actor: str) -> DeploymentRevision:
    """Back to revision ``number`` (by default the one before the current one)."""
    revisions = deployment.revisions.all()
    if number is None:
        current = deployment.revision.number if deployment.revision else 0
        revision = revisions.filter(number__lt=current).order_by("-number").first()
        if revision is None:
            raise ValidationError({"revision": "there is no earlier revision to roll back to"})
    else:
        revision = revisions.filter(number=number).first()
        if revision is None:
            raise ValidationError({"revision": f"{deployment} has no revision {number}"})
    deployment.roll_back(revision)
    reconcile_after_commit(deployment.pk)
    return revision


def reconcile_soon(deployment: Deployment) -> None:
    reconcile_after_commit(deployment.pk)

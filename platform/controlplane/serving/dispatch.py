"""Publishing serving tasks, always after the transaction that motivated them commits."""

from __future__ import annotations

from django.db import transaction


def launch_after_commit(replica_id: int, queue: str) -> None:
    from controlplane.serving.tasks import launch_replica

    transaction.on_commit(lambda: launch_replica.apply_async(args=[replica_id], queue=queue))


def drain_after_commit(replica_id: int, queue: str) -> None:
    from controlplane.serving.tasks import drain_replica

    transaction.on_commit(lambda: drain_replica.apply_async(args=[replica_id], queue=queue))


def reconcile_after_commit(deployment_id: int) -> None:
    from controlplane.serving.tasks import reconcile_deployment

    transaction.on_commit(lambda: reconcile_deployment.delay(deployment_id))

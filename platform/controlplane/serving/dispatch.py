"""Publishing serving tasks, always after the transaction that motivated them commits.

Tasks are named, not imported: ``tasks`` calls the reconciler and scheduler, which call this
module, so importing it here would close a circle. A signature resolves the registered task by
name when it is sent (so eager mode still runs it in place) and falls back to sending by name.
"""

from __future__ import annotations

from celery import current_app
from django.db import transaction

LAUNCH_REPLICA = "serving.launch_replica"
DRAIN_REPLICA = "serving.drain_replica"
RECONCILE_DEPLOYMENT = "serving.reconcile_deployment"


def _send_after_commit(task_name: str, primary_key: int, **options) -> None:
    transaction.on_commit(lambda: current_app.signature(task_name, args=[primary_key]).apply_async(**options))


def launch_after_commit(replica_id: int, queue: str) -> None:
    _send_after_commit(LAUNCH_REPLICA, replica_id, queue=queue)


def drain_after_commit(replica_id: int, queue: str) -> None:
    _send_after_commit(DRAIN_REPLICA, replica_id, queue=queue)


def reconcile_after_commit(deployment_id: int) -> None:
    _send_after_commit(RECONCILE_DEPLOYMENT, deployment_id)

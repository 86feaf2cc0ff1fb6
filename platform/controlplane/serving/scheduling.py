"""From the database to placement and back: free capacity in, a scheduled replica out."""

from __future__ import annotations

from collections import Counter

from django.db import transaction

from controlplane.checkpoints.choices import CheckpointState
from controlplane.fleet.choices import (
    ACCELERATOR_NOUN,
    ENGINE_DEVICE,
    MISSING_RUNTIME,
    SCHEDULABLE_NODE_STATES,
    SHARED_VENDORS,
    AcceleratorHealth,
    NodeState,
)
from controlplane.fleet.models import Accelerator, Node
from controlplane.serving.choices import HOLDING_STATES, ReplicaState
from controlplane.serving.dispatch import launch_after_commit
from controlplane.serving.models import Deployment, Replica
from controlplane.serving.placement import NodeCapacity, Unschedulable, place


def node_capacities(vendor: str) -> list[NodeCapacity]:
    # Cordoned nodes come along, marked, so that an unschedulable reason can mention them.
    nodes = {
        node.pk: node
        for node in Node.objects.filter(
            state__in=(*SCHEDULABLE_NODE_STATES, NodeState.CORDONED)
        ).select_related("domain")
    }
    accelerators = Accelerator.objects.filter(node_id__in=nodes, vendor=vendor, health=AcceleratorHealth.OK)
    if vendor not in SHARED_VENDORS:
        accelerators = accelerators.exclude(replicas__state__in=HOLDING_STATES)
    free: dict[int, list[tuple[int, int]]] = {}
    for acc_id, node_id, index in accelerators.values_list("id", "node_id", "index"):
        free.setdefault(node_id, []).append((acc_id, index))
    load = Counter(
        Replica.objects.filter(node_id__in=nodes, state__in=HOLDING_STATES).values_list("node_id", flat=True)
    )
    return [
        NodeCapacity(
            node.pk,
            node.name,
            str(node.domain),
            tuple(free.get(node.pk, ())),
            load[node.pk],
            cordoned=node.state == NodeState.CORDONED,
            missing_runtime="" if node.can_drive(vendor) else _missing_runtime(vendor),
        )
        for node in nodes.values()
    ]


def _missing_runtime(vendor: str) -> str:
    missing = MISSING_RUNTIME.get(vendor, f"no {ENGINE_DEVICE[vendor]} runtime")
    return f"{ACCELERATOR_NOUN[vendor]} but {missing}"


def checkpoint_problem(deployment: Deployment) -> str | None:
    checkpoint = deployment.checkpoint
    if checkpoint.state != CheckpointState.READY:
        return f"checkpoint {checkpoint} is {checkpoint.state}, not ready"
    return None


def schedule_pending(deployment: Deployment, actor: str) -> str | None:
    """Place every pending replica; returns the reason when one cannot be placed."""
    problem = checkpoint_problem(deployment)
    pending = list(
        deployment.replica_set.filter(state=ReplicaState.PENDING)
        .select_related("revision")
        .order_by("ordinal")
    )
    if problem and pending:
        deployment.mark_unschedulable(problem)
        return problem
    for replica in pending:
        with transaction.atomic():
            # Locking the schedulable nodes serialises placements so two never take the same device.
            list(Node.objects.select_for_update().filter(state__in=SCHEDULABLE_NODE_STATES).order_by("pk"))
            result = place(replica.spec().world_size, deployment.vendor, node_capacities(deployment.vendor))
            if isinstance(result, Unschedulable):
                deployment.mark_unschedulable(result.reason)
                return result.reason
            node = Node.objects.get(pk=result.node_id)
            replica.schedule(node, Accelerator.objects.filter(pk__in=result.accelerator_ids), actor)
            launch_after_commit(replica.pk, node.queue)
    deployment.mark_schedulable()
    return None

"""Node registration and heartbeats, as the agent reports them."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from controlplane.fleet.choices import AcceleratorHealth
from controlplane.fleet.inventory import AcceleratorInfo
from controlplane.fleet.models import Accelerator, Cluster, Node, ScaleUpDomain


@transaction.atomic
def register_node(
    name: str,
    *,
    hostname: str,
    address: str,
    cluster: str = "default",
    domain: str | None = None,
    labels: dict | None = None,
    accelerators: Iterable[AcceleratorInfo] = (),
    runtimes: Iterable[str] | None = None,
) -> Node:
    """``runtimes``: the engine devices the agent can drive (engine.device_runtime.drivable_devices);
    None keeps what was reported before."""
    cluster_row, _ = Cluster.objects.get_or_create(name=cluster)
    domain_row, _ = ScaleUpDomain.objects.get_or_create(cluster=cluster_row, name=domain or name)
    node, created = Node.objects.select_for_update().get_or_create(
        name=name, defaults={"domain": domain_row, "hostname": hostname, "address": address}
    )
    node.domain, node.hostname, node.address = domain_row, hostname, address
    if labels is not None:
        node.labels = labels
    if runtimes is not None:
        node.runtimes = list(runtimes)
    node.save(update_fields=["domain", "hostname", "address", "labels", "runtimes"])
    heartbeat(node, accelerators)
    return node


@transaction.atomic
def heartbeat(node: Node, accelerators: Iterable[AcceleratorInfo]) -> None:
    """Record that the node is alive and what it has; devices it stopped reporting are unavailable."""
    now = timezone.now()
    seen = []
    for info in accelerators:
        row, _ = Accelerator.objects.update_or_create(
            node=node,
            vendor=info.vendor,
            index=info.index,
            defaults={
                "model": info.model,
                "memory_bytes": info.memory_bytes,
                "health": info.health,
                "last_seen": now,
            },
        )
        seen.append(row.pk)
    node.accelerators.exclude(pk__in=seen).update(health=AcceleratorHealth.UNAVAILABLE)
    node.record_heartbeat()

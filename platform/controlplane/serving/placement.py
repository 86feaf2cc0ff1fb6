"""Where a replica can run: a pure function of free capacity, tested without a database.

A replica needs its world size (tp_size × ep_size) in free accelerators of one vendor inside one
scale-up domain, all on one node: one ``chassis serve`` process starts every rank on its own machine,
and a replica is one process on one node's agent. A domain may span nodes (nodes registered with the
same domain, e.g. a rack-scale NVLink domain), but a replica's ranks do not cross nodes yet; when only
the domain's nodes together would fit, the reason says so. Among nodes that fit, the tightest fit wins
(fewest free accelerators left over, then the least loaded, then by name) so large blocks stay whole
for large replicas. A cordoned node is never chosen, nor one whose agent cannot drive the vendor's
devices (an Ascend node without torch_npu): the reason names it instead of a launch that would fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeCapacity:
    node_id: int
    node_name: str
    domain: str
    free: tuple[tuple[int, int], ...]  # (accelerator id, device index) of the wanted vendor, free now
    load: int = 0  # replicas already placed there
    cordoned: bool = False  # an operator took it out of placement: it gets no new replicas
    # Set when its agent cannot drive these devices: "<noun> but <what is missing>", e.g.
    # "Ascend NPUs but no torch_npu runtime (...)"; such a node gets no replica.
    missing_runtime: str = ""


@dataclass(frozen=True)
class Placement:
    node_id: int
    node_name: str
    accelerator_ids: tuple[int, ...]
    device_indices: tuple[int, ...]


@dataclass(frozen=True)
class Unschedulable:
    reason: str


def place(world_size: int, vendor: str, nodes: Sequence[NodeCapacity]) -> Placement | Unschedulable:
    """``world_size``: the accelerators one replica holds (tp_size × ep_size)."""
    if world_size < 1:
        return Unschedulable(f"a replica needs at least 1 accelerator, not {world_size}")
    open_nodes = [node for node in nodes if not node.cordoned and not node.missing_runtime]
    fitting = [node for node in open_nodes if len(node.free) >= world_size]
    undrivable = [n for n in nodes if n.missing_runtime and not n.cordoned and len(n.free) >= world_size]
    if not fitting and undrivable:
        first = undrivable[0]
        reason = f"node {first.node_name} has {len(first.free)} {first.missing_runtime}"
        if len(undrivable) > 1:
            reason += f" ({len(undrivable) - 1} more node{'s' if len(undrivable) > 2 else ''} alike)"
        return Unschedulable(reason)
    if not fitting:
        largest = max((len(node.free) for node in open_nodes), default=0)
        reason = f"needs {world_size} {vendor} in one domain; largest free block is {largest}"
        cordoned = sum(1 for node in nodes if node.cordoned and len(node.free) >= world_size)
        if cordoned:
            reason += f" ({cordoned} cordoned node{'s' if cordoned > 1 else ''} would fit)"
        return Unschedulable(reason + _spanning_note(world_size, open_nodes))
    best = min(fitting, key=lambda node: (len(node.free), node.load, node.node_name))
    chosen = sorted(best.free, key=lambda pair: pair[1])[:world_size]
    return Placement(
        node_id=best.node_id,
        node_name=best.node_name,
        accelerator_ids=tuple(pair[0] for pair in chosen),
        device_indices=tuple(pair[1] for pair in chosen),
    )


def _spanning_note(world_size: int, open_nodes: Sequence[NodeCapacity]) -> str:
    """When the free accelerators of one multi-node domain add up to the replica, say why that is
    not enough: its ranks would have to span nodes."""
    by_domain: dict[str, list[NodeCapacity]] = {}
    for node in open_nodes:
        if node.free:
            by_domain.setdefault(node.domain, []).append(node)
    for domain, members in sorted(by_domain.items()):
        free = sum(len(node.free) for node in members)
        if len(members) > 1 and free >= world_size:
            return (
                f"; domain {domain} has {free} free across {len(members)} nodes, but a replica's ranks "
                "run on one node"
            )
    return ""

"""Where a replica can run: a pure function of free capacity, tested without a database.

A replica needs ``tp_size`` free accelerators of one vendor inside one scale-up domain, all on one
node (one engine process drives them). Among nodes that fit, the tightest fit wins (fewest free
accelerators left over, then the least loaded, then by name) so large blocks stay whole for large
replicas. A cordoned node is never chosen, nor one whose agent cannot drive the vendor's devices
(an Ascend node without torch_npu): the reason names it instead of a launch that would fail.
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


def place(tp_size: int, vendor: str, nodes: Sequence[NodeCapacity]) -> Placement | Unschedulable:
    if tp_size < 1:
        return Unschedulable(f"tp_size must be at least 1, not {tp_size}")
    open_nodes = [node for node in nodes if not node.cordoned and not node.missing_runtime]
    fitting = [node for node in open_nodes if len(node.free) >= tp_size]
    undrivable = [n for n in nodes if n.missing_runtime and not n.cordoned and len(n.free) >= tp_size]
    if not fitting and undrivable:
        first = undrivable[0]
        reason = f"node {first.node_name} has {len(first.free)} {first.missing_runtime}"
        if len(undrivable) > 1:
            reason += f" ({len(undrivable) - 1} more node{'s' if len(undrivable) > 2 else ''} alike)"
        return Unschedulable(reason)
    if not fitting:
        largest = max((len(node.free) for node in open_nodes), default=0)
        reason = f"needs {tp_size} {vendor} in one domain; largest free block is {largest}"
        cordoned = sum(1 for node in nodes if node.cordoned and len(node.free) >= tp_size)
        if cordoned:
            reason += f" ({cordoned} cordoned node{'s' if cordoned > 1 else ''} would fit)"
        return Unschedulable(reason)
    best = min(fitting, key=lambda node: (len(node.free), node.load, node.node_name))
    chosen = sorted(best.free, key=lambda pair: pair[1])[:tp_size]
    return Placement(
        node_id=best.node_id,
        node_name=best.node_name,
        accelerator_ids=tuple(pair[0] for pair in chosen),
        device_indices=tuple(pair[1] for pair in chosen),
    )

"""Where a replica can run: a pure function of free capacity, tested without a database.

A replica needs ``tp_size`` free accelerators of one vendor inside one scale-up domain, all on one
node (one engine process drives them). Among nodes that fit, the tightest fit wins (fewest free
accelerators left over, then the least loaded, then by name) so large blocks stay whole for large
replicas.
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
    fitting = [node for node in nodes if len(node.free) >= tp_size]
    if not fitting:
        largest = max((len(node.free) for node in nodes), default=0)
        return Unschedulable(f"needs {tp_size} {vendor} in one domain; largest free block is {largest}")
    best = min(fitting, key=lambda node: (len(node.free), node.load, node.node_name))
    chosen = sorted(best.free, key=lambda pair: pair[1])[:tp_size]
    return Placement(
        node_id=best.node_id,
        node_name=best.node_name,
        accelerator_ids=tuple(pair[0] for pair in chosen),
        device_indices=tuple(pair[1] for pair in chosen),
    )

"""Persistent zeroed int32 counters for "the last program reduces" kernels.

A split kernel's programs each bump one counter after storing their partials; the program that
arrives last merges them and sets the counter back to 0. So every launch finds and leaves the
buffer all zero, and one buffer per device serves every kernel, call and CUDA-graph replay (launches
on one stream never overlap). A buffer that a graph captured must outlive it: growing keeps the old
one alive, and growing during capture is refused (the graphs' warm-up runs before capture size it).
"""

from __future__ import annotations

import torch

from kernels._common import next_power_of_2

__all__ = ["arrival_counters"]

_MIN_COUNTERS = 1 << 14
_current: dict[torch.device, torch.Tensor] = {}
_retired: list[torch.Tensor] = []  # outgrown buffers that captured graphs may still point at


def arrival_counters(device: torch.device, count: int) -> torch.Tensor:
    """At least ``count`` int32 zeros on ``device``, the same buffer on every call that fits."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    counters = _current.get(device)
    if counters is not None and counters.numel() >= count:
        return counters
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(
            f"arrival counters must grow to {count} during CUDA-graph capture: run the step once "
            "before capturing it"
        )
    if counters is not None:
        _retired.append(counters)
    counters = torch.zeros(max(next_power_of_2(count), _MIN_COUNTERS), dtype=torch.int32, device=device)
    _current[device] = counters
    return counters

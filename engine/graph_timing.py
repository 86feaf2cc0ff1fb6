"""Time GPU work the way decode runs it: back-to-back calls captured in one CUDA graph, replayed.

Used by the engine at start-up (choosing a tensor-parallel all-reduce path) and by the GPU scripts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def capture(calls: Callable[[int], object], n_calls: int) -> torch.cuda.CUDAGraph:
    """``calls(i)`` for i in range(n_calls) captured in one graph on the current device, replayed once.
    The first calls run outside the graph (Triton compiles, cuBLAS workspaces, NCCL communicators are
    set up there)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(min(n_calls, 2)):
            calls(i)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(n_calls):
            calls(i)
    graph.replay()
    return graph


def time_in_graph(calls: Callable[[int], object], n_calls: int, replays: int) -> float:
    """Microseconds per call: ``calls(i)`` for i in range(n_calls) captured in one graph (``capture``),
    replayed ``replays`` times; the median counts."""
    graph = capture(calls, n_calls)
    samples = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / n_calls)
    del graph
    return statistics.median(samples)

"""CUDA graphs for the mixture-of-experts blocks of eager steps: one per MoE layer and token count.

A step that is not a decode graph's (a prompt chunk, a mixed step of prompt chunks and decodes, a
verify step past the decode graphs) runs the model kernel by kernel from Python. Each MoE block then
issues about 20 launches (router, align, expert GEMMs, combine, shared experts) whose host time
exceeded their GPU time on the H200 up to a few thousand tokens (session 16: 438 µs of host issue
for a 2,048-token DeepSeek-V2-Lite block, 7.8 µs as one graph replay). Attention depends on how the
step's tokens split into sequences, so it stays eager; the MoE block depends on the token count
alone, so it is captured once per count on a ladder (``moe_graph_sizes``) and a step's block copies
its rows into a static buffer, replays the graph of the next size up and reads its rows back.

Padding rows (between the step's tokens and the captured size) hold whatever the buffer held last,
finite values; they are routed and run like the others, a cost the ladder's spacing bounds (under a
quarter of the size past 128 tokens), and the routing statistics skip them (``counted_rows``). A token's
result depends on its own row, its routing and the kernels' tiles; the tiles follow the captured
size, not the step's count, so batch-invariant mode (tiles fixed by the batch) does not use these
graphs, nor do tensor- and expert-parallel layers (their collectives stay eager).

All graphs share one memory pool: nothing allocated inside a capture outlives it (the block's
output is copied into ``out``, allocated outside), so replays in any order reuse the same memory.
The block's result is a view of ``out``, valid until the next block runs: a decoder layer consumes it
(the next layer's residual add) before that.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable

import torch

from engine.layers.moe import MoE, moe_layers

# (up to this many tokens, sizes this far apart): the ladder of captured token counts.
LADDER = ((128, 16), (256, 32), (512, 64), (1024, 128), (2048, 256), (4096, 512), (None, 1024))


def moe_graph_sizes(max_tokens: int) -> list[int]:
    """16, 32, .. 128, then sizes a quarter of their own size apart at most (every 32 to 256, every
    64 to 512, .., every 1,024 past 4,096), up to ``max_tokens`` (included as the last size)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    sizes, size = [], 0
    for limit, spacing in LADDER:
        while size < max_tokens and (limit is None or size < limit):
            size += spacing
            sizes.append(min(size, max_tokens))
    return sizes


def graphable_moe_layers(model: torch.nn.Module) -> list[MoE]:
    """The MoE layers whose block a graph may run: one GPU's whole block, no collective inside."""
    return [layer for _, layer in moe_layers(model) if layer.tp.is_single and layer.ep is None]


class MoEBlockGraphs:
    def __init__(
        self, layers: list[MoE], max_tokens: int, hidden: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        if not layers:
            raise ValueError("no MoE layer a graph can run")
        self.layers = layers
        self.sizes = moe_graph_sizes(max_tokens)
        self.device = device
        self.x = torch.zeros((self.sizes[-1], hidden), dtype=dtype, device=device)
        self.out = torch.zeros_like(self.x)
        self.counted_rows = torch.zeros(1, dtype=torch.int64, device=device)
        self._counted = 0  # what counted_rows holds, so a step's layers set it once
        self._index = {id(layer): i for i, layer in enumerate(layers)}
        self.replays: dict[tuple[int, int], Callable[[], None]] = {}  # (layer, size) -> replay
        self.blocks_run = 0  # block runs served by a replay (benchmarks report it)
        self.capture_s = 0.0  # how long ``capture`` took

    def _block(self, layer: int, size: int) -> None:
        self.out[:size].copy_(self.layers[layer].run(self.x[:size], self.counted_rows))

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture every (layer, size), largest size first. A size's kernels are compiled (and
        cuBLAS set up) by one uncounted run per distinct layer shape before its captures."""
        started = time.perf_counter()
        self._set_counted(0)  # warm-up runs route rows that are no request's
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(stream):
            for size in reversed(self.sizes):
                warmed = set()
                for i, layer in enumerate(self.layers):
                    shape = _shape(layer)
                    if shape not in warmed:
                        self._block(i, size)
                        warmed.add(shape)
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph, pool=pool, stream=stream):
                        self._block(i, size)
                    self.replays[(i, size)] = graph.replay
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
        self.capture_s = time.perf_counter() - started

    def use_eager(self) -> None:
        """Replays that rerun the block eagerly on the static buffers: the same padding and
        counting path on devices without graphs (the CPU tests)."""
        for i in range(len(self.layers)):
            for size in self.sizes:

                def replay(i=i, size=size) -> None:
                    with torch.inference_mode():
                        self._block(i, size)

                self.replays[(i, size)] = replay

    def attach(self) -> None:
        """From now on the layers' eager forwards go through ``run``."""
        for layer in self.layers:
            layer.block_graphs = self

    def detach(self) -> None:
        for layer in self.layers:
            layer.block_graphs = None

    def run(self, layer: MoE, x: torch.Tensor) -> torch.Tensor | None:
        """``layer``'s block on ``x`` from its graph of the next captured size up; None where no graph
        serves it (too many rows, none, a layer not captured, or inside another capture: a decode
        graph captures the block itself)."""
        rows = x.shape[0]
        if not 0 < rows <= self.sizes[-1] or x.device != self.x.device or x.dtype != self.x.dtype:
            return None
        if x.is_cuda and torch.cuda.is_current_stream_capturing():
            return None
        index = self._index.get(id(layer))
        if index is None:
            return None
        size = self.sizes[bisect_left(self.sizes, rows)]
        self._set_counted(rows)
        self.x[:rows].copy_(x)
        self.replays[(index, size)]()
        self.blocks_run += 1
        return self.out[:rows]

    def _set_counted(self, rows: int) -> None:
        if rows != self._counted:
            self.counted_rows.fill_(rows)
            self._counted = rows


def _shape(layer: MoE) -> tuple:
    shared = layer.shared_experts
    return (
        tuple(layer.experts.w13.shape),
        tuple(layer.experts.w2.shape),
        None if shared is None else tuple(shared.down_proj.weight.shape),
        layer.gate.shared_slots,
    )

"""Column-major storage for the CPU weights whose one-row products MKL streams faster that way
(``EngineConfig.cpu_weight_layout``).

A decode step at batch 1 on a CPU is one-row products, bound by reading the weights. MKL's fp32 GEMV
over a row-major ``[out, in]`` weight reads a wide weight at about half the rate it reads the same
weight stored column-major. SmolLM2-135M's shapes on a 2-core EPYC, 2 threads, µs per product,
row-major / column-major: q/k/v 960 x 576 167 / 139, o 576 x 576 99 / 70, gate/up 3,072 x 576
582 / 334, LM head 49,152 x 576 8,960 / 4,602; but down 576 x 1,536 181 / 239. From 4 rows up both
orders took about as long and gave the same bits, except the LM head: sliced as ``matmul`` slices a
tall weight, it took 18 ms row-major and 36 ms column-major at 16 rows. So ``auto`` stores a weight
with at least as many outputs as inputs column-major (the same logical ``[out, in]`` tensor with
strides ``(1, out)``) and leaves the others row-major; a tall LM head keeps its row-major weight and
gets a column-major copy for products of one or two rows (``LMHead.one_row_weight``: the vocabulary
times the hidden size once more in memory, 113 MB for SmolLM2). ``row-major`` leaves every weight as
loaded.

Only fp32 weights on a CPU that the torch path multiplies: the Triton kernels index the row-major
layout, and in batch-invariant mode a CPU product's bits must not depend on anything but the row,
which that mode's padded products already fix. The choice depends only on the shapes, never on a
timing at start, so the same config gives the same bits on the same machine every time.
"""

from __future__ import annotations

import torch
from torch import nn

from engine.config import CPU_WEIGHT_LAYOUTS
from engine.layers.batch_invariant import batch_invariant
from engine.layers.embedding import LMHead
from engine.layers.linear import CPU_SLICED_MIN_ROWS as TALL_ROWS
from engine.layers.linear import Linear
from kernels._common import kernels_mode
from kernels.mode_switch import ModeSwitch

layout_switch = ModeSwitch("cpu_weight_layout", CPU_WEIGHT_LAYOUTS)


def set_cpu_weight_layout(mode: str) -> str:
    """Choose how this process stores CPU weights from now on; returns the previous choice."""
    return layout_switch.set(mode)


def cpu_weight_layout() -> str:
    return layout_switch.mode


def prefers_column_major(weight: torch.Tensor) -> bool:
    """Whether ``auto`` stores this weight column-major."""
    return (
        weight.dim() == 2
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and weight.shape[0] >= weight.shape[1]
    )


@torch.no_grad()
def arrange_cpu_weights(model: nn.Module) -> int:
    """Store the product weights of a loaded model in the order this process chose; returns how many
    weights it stored (or copied, for a tall LM head) column-major."""
    if layout_switch.mode != "auto" or batch_invariant() or kernels_mode() == "triton":
        return 0
    changed = 0
    seen: set[int] = set()
    for module in model.modules():
        if not isinstance(module, (Linear, LMHead)):
            continue
        param = module.weight
        if not isinstance(param, torch.Tensor):  # kept 4-bit (engine/layers/int4_weight.py)
            continue
        if id(param) in seen or not prefers_column_major(param) or not param.is_contiguous():
            continue
        seen.add(id(param))
        column_major = param.data.t().contiguous().t()
        if isinstance(module, LMHead) and param.shape[0] >= TALL_ROWS:
            module.one_row_weight = column_major
        else:
            param.data = column_major
        changed += 1
    return changed

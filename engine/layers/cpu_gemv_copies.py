"""Column-major copies of a CPU model's wide weights, for one-row products (batch-1 decode).

On a CPU a one-row ``F.linear(x, W)`` is MKL's GEMV over ``W`` as stored, ``[out, in]`` row-major,
and that GEMV streams the weight at about half the memory bandwidth of the same product over a
column-major copy (``x @ W.t().contiguous()``) when ``out > in``: SmolLM2-135M's fused q/k/v,
gate/up and 49,152-row LM head took 2x as long row-major on a 2-core EPYC (1 thread, min of
repeats). From two rows up MKL's GEMM packs the weight itself and the row-major layout is as fast
or faster (the LM head's 1,024-row slices: 1.5-1.8x faster than column-major at 4 and 16 rows),
so the row-major weight stays and ``engine.layers.linear.matmul`` takes the copy for one row only.
One row never had the bits of the multi-row GEMM (MKL's GEMV and GEMM round differently), so no
batch composition changes its bits because of this; the copy costs the weight's memory once more.
In batch-invariant mode a row must have a multi-row product's bits (``kernels.cpu_invariant`` pads
it to four rows): no copies are made and none is used.
"""

from __future__ import annotations

import torch
from torch import nn

# Attribute set on a weight tensor: its [in, out] contiguous copy.
COPY_ATTRIBUTE = "cpu_column_major"


def add_column_major_copies(model: nn.Module) -> int:
    """Give the weight of every linear layer and LM head on a CPU with more output than input
    features (``[out, in]``, out > in) its column-major copy; returns how many weights got one.
    Run after the weights are loaded; none in batch-invariant mode."""
    from engine.layers.batch_invariant import batch_invariant
    from engine.layers.embedding import LMHead
    from engine.layers.linear import Linear

    count = 0
    if batch_invariant():
        return count
    for module in model.modules():
        if not isinstance(module, Linear | LMHead):
            continue
        weight = module.weight
        if (
            weight.device.type != "cpu"
            or weight.shape[0] <= weight.shape[1]
            or column_major_copy(weight) is not None
        ):
            continue
        setattr(weight, COPY_ATTRIBUTE, weight.detach().t().contiguous())
        count += 1
    return count


def column_major_copy(weight: torch.Tensor) -> torch.Tensor | None:
    """The weight's ``[in, out]`` copy, if ``add_column_major_copies`` made one."""
    return getattr(weight, COPY_ATTRIBUTE, None)

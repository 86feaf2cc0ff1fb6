"""Megatron-style linear layers: column-parallel (output rows split) and row-parallel (input columns
split, partial products summed over the ranks). At world size 1 both are the plain ``Linear``.

Weights load from the full checkpoint tensors: each rank narrows out its own slice, so one
checkpoint serves every tensor-parallel size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.distributed.group import TPGroup
from engine.layers.linear import Linear, takes_gemv
from kernels.gemv import gemv, gemv_silu


class ColumnParallelLinear(Linear):
    """Stacked outputs (fused q/k/v, gate/up); this rank keeps rows ``row_slices[i] = (start, rows)``
    of the i-th checkpoint tensor, whose full row count is ``full_sizes[i]``."""

    def __init__(
        self,
        in_features: int,
        full_sizes: list[int],
        row_slices: list[tuple[int, int]],
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        if len(full_sizes) != len(row_slices):
            raise ValueError("one row slice per stacked output is needed")
        super().__init__(in_features, [rows for _, rows in row_slices], bias, dtype, device)
        self.full_sizes = list(full_sizes)
        self.row_slices = list(row_slices)

    def load(self, kind: str, tensor: torch.Tensor, shard: int = 0) -> None:
        full = self.full_sizes[shard]
        if tensor.dim() == 0 or tensor.shape[0] != full:
            raise ValueError(f"shape {tuple(tensor.shape)} does not have the expected {full} output rows")
        start, rows = self.row_slices[shard]
        super().load(kind, tensor.narrow(0, start, rows), shard)


class RowParallelLinear(Linear):
    """This rank keeps input columns ``[start, start + cols)`` of a ``full_in``-wide weight; the output
    is the all-reduced sum of every rank's partial product (bias added once, after the sum)."""

    def __init__(
        self,
        full_in: int,
        col_slice: tuple[int, int],
        out_features: int,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
        group: TPGroup,
    ) -> None:
        super().__init__(col_slice[1], out_features, bias, dtype, device)
        self.full_in = full_in
        self.col_slice = col_slice
        self.group = group
        # False: hand the all-reduced fp32 sums on unrounded, for a consumer that rounds them itself
        # (the fused add + RMSNorm after o_proj and down_proj), saving a cast kernel per product.
        self.rounds_output = True

    def load(self, kind: str, tensor: torch.Tensor, shard: int = 0) -> None:
        if kind == "weight":
            if tensor.dim() != 2 or tensor.shape[1] != self.full_in:
                raise ValueError(
                    f"shape {tuple(tensor.shape)} does not have the expected {self.full_in} input columns"
                )
            tensor = tensor.narrow(1, *self.col_slice)
        super().load(kind, tensor, shard)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.group.is_single:
            return super().forward(x)
        # Sum the partial products in fp32 and round once, as one unsplit matmul does: summing
        # bf16-rounded halves flips greedy tokens at near-ties against tensor_parallel_size=1.
        flat = x.reshape(-1, x.shape[-1])
        if takes_gemv(flat, self.weight):  # decode-sized: the GEMV hands out its fp32 sums
            return self._reduced(gemv(flat, self.weight, out_dtype=torch.float32), x)
        if x.dtype in (torch.bfloat16, torch.float16):
            partial = _fp32_partial(x, self.weight)
            if partial is not None:
                return self._reduced(partial, x)
        out = self.group.all_reduce(F.linear(x, self.weight))
        return out if self.bias is None else out + self.bias

    def forward_silu(self, gate_up: torch.Tensor) -> torch.Tensor:
        if self.group.is_single:
            return super().forward_silu(gate_up)
        return self._reduced(gemv_silu(gate_up, self.weight, out_dtype=torch.float32), gate_up)

    def _reduced(self, partial: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The all-reduced sum of every rank's ``partial`` in x's dtype and shape, plus the bias
        (fp32 and unrounded when ``rounds_output`` is off and there is no bias)."""
        out = self.group.all_reduce(partial).view(*x.shape[:-1], partial.shape[-1])
        if self.bias is None and not self.rounds_output:
            return out
        out = out.to(x.dtype)
        return out if self.bias is None else out + self.bias


_mm_out_dtype_works = True


def _fp32_partial(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor | None:
    """x @ weight.T accumulated and returned in fp32 without upcasting the weight on accelerators
    (cuBLAS through ``torch.mm(out_dtype=)``); None where that is unavailable there."""
    global _mm_out_dtype_works
    if x.device.type == "cpu":  # tests and CPU serving: upcasting is cheap at these sizes
        return F.linear(x.float(), weight.float())
    if x.device.type != "cuda" or not _mm_out_dtype_works:
        return None
    try:
        flat = torch.mm(x.reshape(-1, x.shape[-1]), weight.t(), out_dtype=torch.float32)
    except (RuntimeError, TypeError, NotImplementedError):  # older torch: bf16 all-reduce instead
        _mm_out_dtype_works = False
        return None
    return flat.view(*x.shape[:-1], weight.shape[0])

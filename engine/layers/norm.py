from __future__ import annotations

import torch
from torch import nn

from engine.layers.linear import matmul, takes_gemv
from kernels.gemv_norm import gemv_norm
from kernels.rms_norm import fused_add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    def __init__(
        self, size: int, eps: float, dtype: torch.dtype, device: torch.device, offset: float = 0.0
    ) -> None:
        """``offset``: the checkpoint stores the scale less this (Gemma's ``1 + weight``: 1.0); it is
        added on load, so every kernel multiplies by the one weight. Such a norm computes in
        Gemma's order, as transformers' ``GemmaRMSNorm`` does: its weight stays in fp32 (``1 + w``
        in bf16 would lose up to 0.4 %) and multiplies the unrounded normalised value."""
        super().__init__()
        self.eps = eps
        self.offset = offset
        self.round_normed = not offset
        weight_dtype = dtype if not offset else torch.float32
        self.weight = nn.Parameter(torch.ones(size, dtype=weight_dtype, device=device), False)

    def load(self, kind: str, tensor: torch.Tensor, shard: int = 0) -> None:
        """Copy the checkpoint's ``weight`` in, plus ``offset`` (added in fp32, then rounded once)."""
        if kind != "weight" or tensor.shape != self.weight.shape:
            raise ValueError(f"{kind} of shape {tuple(tensor.shape)} does not fit {tuple(self.weight.shape)}")
        self.weight.data.copy_(tensor.float() + self.offset if self.offset else tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes over the last dimension; any leading shape."""
        shape = x.shape
        return rms_norm(x.reshape(-1, shape[-1]), self.weight, self.eps, self.round_normed).view(shape)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual) in one pass."""
        return fused_add_rms_norm(x, residual, self.weight, self.eps, self.round_normed)

    def norm_matmul(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        weight: torch.Tensor,
        bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(matmul(norm(h), weight, bias), h)`` with ``h = x + residual`` (``x`` without one), for
        ``x: [T, H]``. Decode-sized inputs on the Triton GEMV do it in one kernel, which saves the
        norm's launch (~2 us on an H200); everything else runs the norm, then ``matmul``."""
        if (
            self.round_normed
            and x.dim() == 2
            and x.dtype == self.weight.dtype
            and takes_gemv(x, weight, normed=True)
        ):
            return gemv_norm(x, residual, self.weight, self.eps, weight, bias)
        if residual is None:
            normed, residual = self(x), x
        else:
            normed, residual = self.add_and_norm(x, residual)
        return matmul(normed, weight, bias), residual

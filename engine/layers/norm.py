from __future__ import annotations

import torch
from torch import nn

from kernels.rms_norm import fused_add_rms_norm, rms_norm


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device), False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalizes over the last dimension; any leading shape."""
        shape = x.shape
        return rms_norm(x.reshape(-1, shape[-1]), self.weight, self.eps).view(shape)

    def add_and_norm(self, x: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual) in one pass."""
        return fused_add_rms_norm(x, residual, self.weight, self.eps)

from __future__ import annotations

import torch
from torch import nn

from engine.layers.linear import Linear
from kernels.activation import silu_and_mul


class GatedMLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), with gate and up fused into one matmul."""

    def __init__(self, hidden: int, intermediate: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.gate_up_proj = Linear(hidden, [intermediate, intermediate], False, dtype, device)
        self.down_proj = Linear(intermediate, hidden, False, dtype, device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x)))

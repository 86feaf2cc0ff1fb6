"""A linear layer whose output may be several checkpoint tensors stacked (fused q/k/v, gate/up)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Module):
    def __init__(
        self,
        in_features: int,
        output_sizes: list[int] | int,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.output_sizes = [output_sizes] if isinstance(output_sizes, int) else list(output_sizes)
        out_features = sum(self.output_sizes)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=dtype, device=device), False)
        self.bias = (
            nn.Parameter(torch.empty(out_features, dtype=dtype, device=device), False) if bias else None
        )

    def load(self, kind: str, tensor: torch.Tensor, shard: int = 0) -> None:
        """Copy one checkpoint tensor ('weight' or 'bias') into output slice ``shard``."""
        target = self.weight if kind == "weight" else self.bias
        if target is None:
            raise ValueError(f"checkpoint has a {kind} this layer does not expect")
        offset = sum(self.output_sizes[:shard])
        part = target.data[offset : offset + self.output_sizes[shard]]
        if part.shape != tensor.shape:
            raise ValueError(f"shape {tuple(tensor.shape)} does not fit slot {tuple(part.shape)}")
        part.copy_(tensor)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

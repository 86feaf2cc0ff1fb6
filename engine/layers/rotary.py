from __future__ import annotations

import torch
from torch import nn

from kernels.rotary import build_cos_sin_cache, rotary_embedding


class RotaryEmbedding(nn.Module):
    def __init__(
        self,
        head_dim: int,
        max_position: int,
        base: float,
        scaling: dict | None,
        device: torch.device,
        is_neox: bool = True,
    ) -> None:
        super().__init__()
        cache = build_cos_sin_cache(head_dim, max_position, base, scaling, device=device)
        self.register_buffer("cos_sin_cache", cache, persistent=False)
        # True: rotate_half pairs (first half against second); False: interleaved even/odd pairs
        # (DeepSeek's rope_interleave).
        self.is_neox = is_neox

    def forward(
        self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rotary_embedding(positions, q, k, self.cos_sin_cache, is_neox=self.is_neox)

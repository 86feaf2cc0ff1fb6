from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Embedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden, dtype=dtype, device=device), False)

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(token_ids, self.weight)


class LMHead(nn.Module):
    """Projects hidden states to vocabulary logits, always returned in fp32 for the sampler."""

    def __init__(self, vocab_size: int, hidden: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden, dtype=dtype, device=device), False)

    def tie_to(self, embedding: Embedding) -> None:
        self.weight = embedding.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.weight).float()

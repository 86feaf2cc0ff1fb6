"""Token embedding and LM head, split over tensor-parallel ranks by vocabulary rows.

The vocabulary is padded to a multiple of the rank count; padded rows are zero and their logits
are cut off after the gather, so every rank count sees the same ``vocab_size`` logits. Gemma scales
the embeddings (``multiplier``) and soft-caps the logits (``softcap``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.distributed.group import SINGLE, TPGroup
from engine.distributed.sharding import vocab_rows
from engine.layers.linear import matmul
from engine.layers.norm import RMSNorm
from kernels import cpu_invariant


class _VocabRows(nn.Module):
    def __init__(
        self, vocab_size: int, hidden: int, dtype: torch.dtype, device: torch.device, group: TPGroup
    ) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.group = group
        self.start, self.rows, per_rank = vocab_rows(vocab_size, group.world_size, group.rank)
        self.weight = nn.Parameter(torch.zeros(per_rank, hidden, dtype=dtype, device=device), False)

    def load(self, kind: str, tensor: torch.Tensor, shard: int = 0) -> None:
        if tensor.shape != (self.vocab_size, self.weight.shape[1]):
            raise ValueError(
                f"shape {tuple(tensor.shape)} is not the expected {(self.vocab_size, self.weight.shape[1])}"
            )
        self.weight.data[: self.rows].copy_(tensor.narrow(0, self.start, self.rows))


class Embedding(_VocabRows):
    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        dtype: torch.dtype,
        device: torch.device,
        group: TPGroup = SINGLE,
        multiplier: float | None = None,
    ) -> None:
        """``multiplier``: every embedding is scaled by it, rounded to ``dtype`` first as transformers
        does (Gemma's sqrt(3072) is 55.5 in bf16)."""
        super().__init__(vocab_size, hidden, dtype, device, group)
        self.multiplier = None if multiplier is None else torch.tensor(multiplier, dtype=dtype).item()

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        x = self._lookup(token_ids)
        return x if self.multiplier is None else x * self.multiplier

    def _lookup(self, token_ids: torch.Tensor) -> torch.Tensor:
        if self.group.is_single:
            return F.embedding(token_ids, self.weight)
        # Ids of other ranks look up row 0 and are zeroed; the all-reduce adds the owning rank's row.
        local = token_ids - self.start
        outside = (local < 0) | (local >= self.rows)
        x = F.embedding(local.masked_fill(outside, 0), self.weight)
        x = x.masked_fill(outside.unsqueeze(-1), 0)
        return self.group.all_reduce(x)


class LMHead(_VocabRows):
    """Projects hidden states to vocabulary logits, always returned in fp32 for the sampler;
    ``softcap``: logits become ``softcap * tanh(logits / softcap)``."""

    ONE_ROW_MAX = 2

    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        dtype: torch.dtype,
        device: torch.device,
        group: TPGroup = SINGLE,
        softcap: float | None = None,
    ) -> None:
        super().__init__(vocab_size, hidden, dtype, device, group)
        self.softcap = softcap
        # A column-major copy of the weight for products of at most ONE_ROW_MAX rows, where one
        # makes them faster (engine/layers/cpu_weight_layout.py); None: the weight serves every product.
        self.one_row_weight: torch.Tensor | None = None

    def tie_to(self, embedding: Embedding) -> None:
        self.weight = embedding.weight  # same vocabulary rows on this rank

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self._gathered(matmul(hidden, self._weight_for(hidden)))  # the decode GEMV at a few rows

    def forward_norm(
        self, x: torch.Tensor, residual: torch.Tensor, norm: RMSNorm, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``self(norm(x + residual))``, the norm folded into the GEMV for decode-sized inputs;
        ``out``: an fp32 ``[rows, vocab]`` buffer the logits are written into (and returned)."""
        projected, _ = norm.norm_matmul(x, residual, self._weight_for(x))
        return self._gathered(projected, out)

    def _weight_for(self, x: torch.Tensor) -> torch.Tensor:
        if self.one_row_weight is not None and x.numel() <= self.ONE_ROW_MAX * x.shape[-1]:
            return self.one_row_weight
        return self.weight

    def _gathered(self, projected: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        if out is not None and self.group.is_single and self.softcap is None:
            return out.copy_(projected)  # the fp32 conversion itself, into the caller's buffer
        logits = projected.float()
        if not self.group.is_single:
            logits = self.group.all_gather_last_dim(logits)[..., : self.vocab_size]
        if self.softcap is not None:
            # tanh through the vectorized path whatever the vocabulary size (kernels/cpu_invariant.py)
            logits = cpu_invariant.pointwise(torch.tanh, logits / self.softcap) * self.softcap
        return logits if out is None else out.copy_(logits)

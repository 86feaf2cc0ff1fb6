"""The tensor-parallel group a model shard belongs to, and the collectives its layers and runner need.

A model is built with one ``TPGroup`` passed down explicitly; at world size 1 (``SINGLE``) every
collective is a no-op, so the single-accelerator path runs the same layer code with no ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.distributed.symmetric_all_reduce import SymmetricAllReduce


@dataclass(frozen=True)
class TPGroup:
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside a group of {self.world_size}")

    @property
    def is_single(self) -> bool:
        return self.world_size == 1

    def all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of ``x`` over the ranks: ``x`` itself summed in place (NCCL / gloo / HCCL), or a
        new tensor (symmetric memory, for small CUDA inputs). Use the returned tensor."""
        if self.world_size > 1:
            if _symmetric is not None:
                summed = _symmetric(x)
                if summed is not None:
                    return summed
            import torch.distributed as dist

            dist.all_reduce(x)
        return x

    def all_reduce_counts(self, x: torch.Tensor) -> torch.Tensor:
        """The sum of integer ``x`` over the ranks, in place, always through the process group's own
        backend (the symmetric-memory path is for activations)."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(x)
        return x

    def broadcast_from_first(self, x: torch.Tensor) -> torch.Tensor:
        """Overwrite ``x`` on every rank with rank 0's ``x``, in place; returns it."""
        if self.world_size > 1:
            import torch.distributed as dist

            dist.broadcast(x, src=0)
        return x

    def all_gather_last_dim(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every rank's ``x`` along the last dimension, in rank order."""
        if self.world_size == 1:
            return x
        import torch.distributed as dist

        x = x.contiguous()
        if x.device.type == "cpu":  # gloo has no all_gather_into_tensor
            parts = [torch.empty_like(x) for _ in range(self.world_size)]
            dist.all_gather(parts, x)
            return torch.cat(parts, dim=-1)
        # One collective into a [world, ...] buffer (NCCL / HCCL; also safe inside a CUDA graph).
        gathered = torch.empty((self.world_size, *x.shape), dtype=x.dtype, device=x.device)
        dist.all_gather_into_tensor(gathered, x)
        return torch.cat(gathered.unbind(0), dim=-1)

    def gather_rows(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """Every rank's rows ``x`` (rank r has ``counts[r]``), concatenated in rank order, on every
        rank (padded to the longest for the collective)."""
        if self.world_size == 1:
            return x
        import torch.distributed as dist

        longest = max(counts)
        padded = x.new_zeros((longest, *x.shape[1:]))
        padded[: x.shape[0]] = x
        if x.device.type == "cpu":
            parts = [torch.empty_like(padded) for _ in range(self.world_size)]
            dist.all_gather(parts, padded)
        else:
            gathered = torch.empty((self.world_size, *padded.shape), dtype=x.dtype, device=x.device)
            dist.all_gather_into_tensor(gathered, padded)
            parts = list(gathered.unbind(0))
        return torch.cat([part[:n] for part, n in zip(parts, counts, strict=True)])


SINGLE = TPGroup()

# This process's symmetric-memory all-reduce, if its group set one up (one group per process).
_symmetric: SymmetricAllReduce | None = None


def use_symmetric_all_reduce(fast: SymmetricAllReduce | None) -> None:
    global _symmetric
    _symmetric = fast

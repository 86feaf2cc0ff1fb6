"""The tensor-parallel group a model shard belongs to, and the collectives its layers and runner need.

A model is built with one ``TPGroup`` passed down explicitly; at world size 1 (``SINGLE``) every
collective is a no-op, so the single-accelerator path runs the same layer code with no ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


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
        """Sum ``x`` over the ranks, in place; returns it."""
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


SINGLE = TPGroup()

"""Group a batch's (token, slot) pairs by expert, each expert's list padded to whole row tiles.

Pair ``p = token * k + slot`` is routed to expert ``topk_ids.view(-1)[p]``. The grouped GEMMs give
one program ``block_m`` consecutive entries of ``sorted_pair_ids``, all of one expert
(``expert_ids[block]``). Padding entries hold ``T * k``, which no pair has. Built with torch ops
only and without a device-to-host copy, so its shapes depend on the batch shape alone (CUDA graphs).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["AlignedPairs", "max_padded_pairs", "moe_align_block_size"]


@dataclass(frozen=True)
class AlignedPairs:
    sorted_pair_ids: torch.Tensor  # int32 [max_padded_pairs]: pair ids by expert, padded with T * k
    expert_ids: torch.Tensor  # int32 [max_padded_pairs / block_m]: the expert of each tile, -1 past the end
    num_tokens_post_padded: torch.Tensor  # int32 [1]: entries in use; tiles from there on are all padding


def max_padded_pairs(num_pairs: int, num_experts: int, block_m: int) -> int:
    """An upper bound of the padded length: at most min(pairs, experts) lists, each padded by < block_m."""
    bound = num_pairs + min(num_pairs, num_experts) * (block_m - 1)
    return -(-bound // block_m) * block_m


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
    flat = topk_ids.reshape(-1).long()
    num_pairs = flat.numel()
    device = topk_ids.device
    order = torch.argsort(flat, stable=True)
    # Not torch.bincount: on CUDA it reads the largest id back to the host, which a graph capture forbids.
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).scatter_add_(
        0, flat, torch.ones_like(flat)
    )
    padded = (counts + block_m - 1) // block_m * block_m
    padded_ends = torch.cumsum(padded, 0)
    starts = torch.cumsum(counts, 0) - counts
    sorted_experts = flat[order]
    destination = (
        (padded_ends - padded)[sorted_experts]
        + torch.arange(num_pairs, device=device)
        - starts[sorted_experts]
    )
    capacity = max_padded_pairs(num_pairs, num_experts, block_m)
    sorted_pair_ids = torch.full((capacity,), num_pairs, dtype=torch.int32, device=device)
    sorted_pair_ids.scatter_(0, destination, order.to(torch.int32))
    tile_starts = torch.arange(0, capacity, block_m, device=device)
    expert_ids = torch.searchsorted(padded_ends, tile_starts, right=True)
    expert_ids = torch.where(expert_ids < num_experts, expert_ids, -1).to(torch.int32)
    return AlignedPairs(sorted_pair_ids, expert_ids, padded_ends[-1:].to(torch.int32))

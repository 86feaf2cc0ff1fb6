"""Group a batch's (token, slot) pairs by expert, each expert's list padded to whole row tiles.

Pair ``p = token * k + slot`` is routed to expert ``topk_ids.view(-1)[p]``. The grouped GEMMs give
one program ``block_m`` consecutive entries of ``sorted_pair_ids``, all of one expert
(``expert_ids[block]``). Padding entries hold ``T * k``, which no pair has. Shapes depend on the batch
shape alone and nothing is read back to the host, so both paths can be captured in a CUDA graph.

On CUDA this is one Triton launch (``_align_kernel``), a program per ``_CHUNK`` pairs, and more
where the padded length needs them (one program per ``BLOCK`` entries, up to one per SM). Each program histograms all
ids (the whole batch and the part before its chunk), from which it derives every expert's padded
start, then places its own chunk (programs past the last chunk have none): a pair's slot is its
expert's start, plus the pairs of that expert before the chunk, plus its rank among them inside the
chunk (a cumulative sum of the one-hot experts), which keeps each expert's list in pair order as
the stable sort does. All programs split the padding entries and ``expert_ids`` between them, so at
decode batches (a few hundred pairs, a padded length of thousands) that walk is not left to one
program; all their writes are disjoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels._common import (
    await_inputs,
    cdiv,
    launch_overlap,
    next_power_of_2,
    num_compute_units,
    tl,
    triton,
    use_triton,
)

__all__ = ["AlignedPairs", "max_padded_pairs", "moe_align_block_size"]

_CHUNK = 1024  # pairs placed per program; every program also reads all ids in blocks of this size


@dataclass(frozen=True)
class AlignedPairs:
    sorted_pair_ids: torch.Tensor  # int32 [max_padded_pairs]: pair ids by expert, padded with T * k
    expert_ids: torch.Tensor  # int32 [max_padded_pairs / block_m]: the expert of each tile, -1 past the end
    num_tokens_post_padded: torch.Tensor  # int32 [1]: entries in use; tiles from there on are all padding


def max_padded_pairs(num_pairs: int, num_experts: int, block_m: int) -> int:
    """An upper bound of the padded length: at most min(pairs, experts) lists, each padded by < block_m."""
    bound = num_pairs + min(num_pairs, num_experts) * (block_m - 1)
    return -(-bound // block_m) * block_m


@triton.jit(do_not_specialize=["num_pairs", "capacity"])
def _align_kernel(
    ids_ptr,
    sorted_pair_ids_ptr,
    expert_ids_ptr,
    total_ptr,
    num_pairs,
    num_experts,
    block_m,
    capacity,
    CHUNK: tl.constexpr,
    E_PAD: tl.constexpr,
    BLOCK: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    pid = tl.program_id(0)
    chunk_start = tl.minimum(pid * CHUNK, num_pairs)
    chunk_end = tl.minimum(chunk_start + CHUNK, num_pairs)
    experts = tl.arange(0, E_PAD)

    before = tl.zeros([E_PAD], dtype=tl.int32)  # pairs of each expert ahead of this chunk
    rest = tl.zeros([E_PAD], dtype=tl.int32)
    for start in range(0, chunk_start, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        mask = offs < chunk_start
        before += tl.histogram(tl.load(ids_ptr + offs, mask=mask, other=0).to(tl.int32), E_PAD, mask=mask)
    for start in range(chunk_start, num_pairs, CHUNK):
        offs = start + tl.arange(0, CHUNK)
        mask = offs < num_pairs
        rest += tl.histogram(tl.load(ids_ptr + offs, mask=mask, other=0).to(tl.int32), E_PAD, mask=mask)
    counts = before + rest
    padded = (counts + block_m - 1) // block_m * block_m
    ends = tl.cumsum(padded, axis=0)
    starts = ends - padded
    if pid == 0:
        tl.store(total_ptr, tl.sum(padded, axis=0))

    next_slot = starts + before  # per expert: where its next pair of this chunk goes
    for start in range(chunk_start, chunk_end, BLOCK):
        pairs = start + tl.arange(0, BLOCK)
        mask = pairs < chunk_end
        ids = tl.load(ids_ptr + pairs, mask=mask, other=E_PAD).to(tl.int32)
        one_hot = (ids[:, None] == experts[None, :]).to(tl.int32)
        slots = tl.cumsum(one_hot, axis=0) - one_hot + next_slot[None, :]
        destination = tl.sum(one_hot * slots, axis=1)
        tl.store(sorted_pair_ids_ptr + destination, pairs, mask=mask)
        next_slot += tl.sum(one_hot, axis=0)

    # Padding: the entries of no expert's range [start, start + count); the pairs above fill the others.
    real_ends = starts + counts
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, capacity, step):
        q = start + tl.arange(0, BLOCK)
        inside = (q[:, None] >= starts[None, :]) & (q[:, None] < real_ends[None, :])
        padding = tl.sum(inside.to(tl.int32), axis=1) == 0
        tl.store(sorted_pair_ids_ptr + q, num_pairs, mask=padding & (q < capacity))
    # A tile's expert: the number of padded lists ending at or before its first entry (-1 past the last).
    for start in range(pid * BLOCK, capacity // block_m, step):
        tiles = start + tl.arange(0, BLOCK)
        expert = tl.sum((ends[None, :] <= tiles[:, None] * block_m).to(tl.int32), axis=1)
        expert = tl.where(expert < num_experts, expert, -1)
        tl.store(expert_ids_ptr + tiles, expert, mask=tiles < capacity // block_m)


def _block(e_pad: int) -> int:
    """Rows of the kernel's [BLOCK, E_PAD] one-hot tiles: about 64 int32 registers a thread at 4 warps."""
    return min(max(8192 // e_pad, 16), _CHUNK)


def _launch(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
    flat = topk_ids.reshape(-1)
    num_pairs = flat.numel()
    capacity = max_padded_pairs(num_pairs, num_experts, block_m)
    device = topk_ids.device
    sorted_pair_ids = torch.empty(capacity, dtype=torch.int32, device=device)
    expert_ids = torch.empty(capacity // block_m, dtype=torch.int32, device=device)
    total = torch.empty(1, dtype=torch.int32, device=device)
    e_pad = next_power_of_2(num_experts)
    block = _block(e_pad)
    # Program 0 also runs with no pairs: it writes the total. Past a chunk's worth, a program per SM
    # at most: each one histograms every id, so more would only repeat that work.
    spread = min(cdiv(capacity, block), num_compute_units(device))
    programs = max(1, cdiv(num_pairs, _CHUNK), spread)
    _align_kernel[(programs,)](
        flat, sorted_pair_ids, expert_ids, total, num_pairs, num_experts, block_m, capacity,
        CHUNK=_CHUNK, E_PAD=e_pad, BLOCK=block, num_warps=4, **launch_overlap(device, topk_ids.shape[0]),
    )  # fmt: skip
    return AlignedPairs(sorted_pair_ids, expert_ids, total)


def moe_align_block_size(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
    if use_triton(topk_ids):
        return _launch(topk_ids, num_experts, block_m)
    return _align_torch(topk_ids, num_experts, block_m)


def _align_torch(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
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

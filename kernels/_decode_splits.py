"""Flash-decoding's split bookkeeping, shared by the paged-attention and MLA decode kernels.

A decode program attends over one split of a sequence's context and leaves, per query head, an
fp32 partial softmax state: running max (log2 domain), sum and unnormalized accumulator, laid out
``[batch, heads, splits(, head_dim)]``. With a single split it writes the normalized output
instead. ``merge_splits`` combines one (sequence, head) row's splits in split order, whether it
runs in ``decode_reduce_kernel`` or in the last split program of a fused reduce, so both give the
same bits.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, cdiv, launch_overlap, next_power_of_2, num_compute_units, tl, triton


def choose_splits(
    programs_per_split: int, max_context: int, min_keys_per_split: int, max_splits: int, device: torch.device
) -> int:
    """Splits per sequence so that ``programs_per_split * splits`` covers about two waves of SMs.

    ``programs_per_split``: the programs of one split over the whole batch. ``max_context`` is the
    block-table capacity (a host-side shape: no device sync, and a fixed value under CUDA graphs);
    each split keeps at least ``min_keys_per_split`` keys of it.
    """
    wanted = cdiv(2 * num_compute_units(device), max(programs_per_split, 1))
    by_length = max(cdiv(max_context, min_keys_per_split), 1)
    return max(1, min(wanted, by_length, max_splits))


def split_partials(out: torch.Tensor, num_splits: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The partial (max, sum, acc) buffers for ``out: [batch, heads, head_dim]``; with one split the
    kernel writes ``out`` directly and ``out`` stands in for all three."""
    if num_splits == 1:
        return out, out, out
    batch, num_heads, head_dim = out.shape
    partial_max = torch.empty((batch, num_heads, num_splits), dtype=torch.float32, device=out.device)
    partial_sum = torch.empty_like(partial_max)
    partial_acc = torch.empty(
        (batch, num_heads, num_splits, head_dim), dtype=torch.float32, device=out.device
    )
    return partial_max, partial_sum, partial_acc


@triton.jit
def store_split(
    out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    rows,
    split,
    num_splits,
    head_dim,
    dims,
    row_mask,
    tile_mask,
    m_i,
    l_i,
    acc,
    SINGLE_SPLIT: tl.constexpr,
):
    """Store one split's state of the (sequence, head) ``rows``: the output itself with a single
    split (a row with no keys gives zeros), else its partials."""
    if SINGLE_SPLIT:
        out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
        out_offsets = rows[:, None] * head_dim + dims[None, :]
        tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=tile_mask)
    else:
        partial_rows = rows * num_splits + split
        tl.store(partial_max_ptr + partial_rows, m_i, mask=row_mask)
        tl.store(partial_sum_ptr + partial_rows, l_i, mask=row_mask)
        tl.store(partial_acc_ptr + partial_rows[:, None] * head_dim + dims[None, :], acc, mask=tile_mask)


@triton.jit
def merge_splits(
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    out_ptr,
    row,
    head_dim,
    num_splits,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    live_splits,
):
    """Merge the first ``live_splits`` of the ``num_splits`` partial softmax states of one (sequence,
    query head) ``row`` into ``out`` (the splits past them stored nothing)."""
    splits = tl.arange(0, BLOCK_S)
    split_mask = splits < live_splits
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < head_dim
    # .cg: other programs wrote these; read them from L2, never from a stale L1 line.
    part_max = tl.load(
        partial_max_ptr + row * num_splits + splits,
        mask=split_mask,
        other=float("-inf"),
        cache_modifier=".cg",
    )
    part_sum = tl.load(
        partial_sum_ptr + row * num_splits + splits, mask=split_mask, other=0.0, cache_modifier=".cg"
    )
    acc_offsets = (row * num_splits + splits)[:, None] * head_dim + dims[None, :]
    acc_mask = split_mask[:, None] & dim_mask[None, :]
    part_acc = tl.load(partial_acc_ptr + acc_offsets, mask=acc_mask, other=0.0, cache_modifier=".cg")
    weights = tl.exp2(part_max - tl.max(part_max, axis=0))
    total = tl.sum(weights * part_sum, axis=0)
    out = tl.sum(weights[:, None] * part_acc, axis=0) / tl.where(total == 0.0, 1.0, total)
    tl.store(out_ptr + row * head_dim + dims, out.to(out_ptr.dtype.element_ty), mask=dim_mask)


@triton.jit
def live_split_count(seq_len, num_splits, BLOCK_N: tl.constexpr, MIN_KEYS: tl.constexpr):
    """With ``MIN_KEYS`` > 0 (``keys_per_split``'s floor): the splits that hold keys of a sequence of
    ``seq_len`` (at least one: split 0 stores even an empty sequence's state)."""
    return tl.maximum(tl.cdiv(seq_len, keys_per_split(seq_len, num_splits, BLOCK_N, MIN_KEYS)), 1)


@triton.jit
def keys_per_split(seq_len, num_splits, BLOCK_N: tl.constexpr, MIN_KEYS: tl.constexpr):
    """A sequence's keys shared evenly by the splits, in whole tiles; with ``MIN_KEYS`` > 0 at least
    that many, so that a short context leaves the splits past its last key empty (the split count
    follows the block tables' width, in a CUDA graph the longest sequence allowed)."""
    keys = tl.cdiv(tl.cdiv(seq_len, num_splits), BLOCK_N) * BLOCK_N
    if MIN_KEYS > 0:
        keys = tl.maximum(keys, MIN_KEYS)
    return keys


@triton.jit(do_not_specialize=["num_splits"])
def decode_reduce_kernel(
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    out_ptr,
    seq_lens_ptr,
    num_heads,
    head_dim,
    num_splits,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
    LIVE_BLOCK_N: tl.constexpr,
    LIVE_MIN_KEYS: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program per (sequence, query head).
    row = tl.program_id(0).to(tl.int64)
    live = num_splits
    if LIVE_MIN_KEYS > 0:  # the split kernel stored only the splits that hold keys
        seq_len = tl.load(seq_lens_ptr + row // num_heads)
        live = live_split_count(seq_len, num_splits, LIVE_BLOCK_N, LIVE_MIN_KEYS)
    merge_splits(
        partial_max_ptr,
        partial_sum_ptr,
        partial_acc_ptr,
        out_ptr,
        row,
        head_dim,
        num_splits,
        BLOCK_S,
        BLOCK_D,
        live,
    )


def reduce_splits(
    partials: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    num_splits: int,
    block_d: int,
    live: tuple[torch.Tensor, int, int] | None = None,
) -> None:
    """Merge ``split_partials``' buffers into ``out: [batch, heads, head_dim]`` in a second kernel.
    ``live``: ``(seq_lens, block_n, min_keys)`` of a split kernel that stored only the splits holding
    keys (``keys_per_split`` with that floor); the reduce then reads only those."""
    partial_max, partial_sum, partial_acc = partials
    batch, num_heads, head_dim = out.shape
    seq_lens, block_n, min_keys = live if live is not None else (out, 1, 0)
    decode_reduce_kernel[(batch * num_heads,)](
        partial_max, partial_sum, partial_acc, out, seq_lens, num_heads, head_dim, num_splits,
        BLOCK_S=next_power_of_2(num_splits), BLOCK_D=block_d, LIVE_BLOCK_N=block_n, LIVE_MIN_KEYS=min_keys,
        num_warps=4, **launch_overlap(out.device, batch),
    )  # fmt: skip

"""Single-token decode attention over the paged KV cache, split across programs (flash-decoding).

Each sequence's one query sits at position ``seq_lens[b] - 1``. The Triton path splits a long
context into ``num_splits`` chunks, each program computing a partial (max, sum, acc) for all query
heads of one KV group. The partials are merged either by the program of each (sequence, KV group)
that finishes last (``FUSED_REDUCE``: it counts arrivals on a persistent counter) or by a second
kernel; both run ``kernels._decode_splits.merge_splits``, reading the splits in the same order, so
they give the same bits.
"""

from __future__ import annotations

import torch

from kernels._arrival_counters import arrival_counters
from kernels._common import await_inputs, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels._decode_splits import choose_splits, merge_splits, reduce_splits, split_partials, store_split
from kernels._paged import (
    LOG2E,
    attend,
    attend_kv_range,
    check_launch_layout,
    check_paged_inputs,
    dot_in_fp32,
    gather_context,
    head_tile,
)
from kernels.paged_attention_sdpa import paged_attention_decode_sdpa

__all__ = ["paged_attention_decode", "paged_attention_decode_torch"]


# Keys per inner-loop tile, and the fewest keys a split is given. One tile per split is enough: at
# batch 1 the reduce reads a few KiB of partials, while too few programs leave most SMs idle (a
# 1024-token context in 4 splits ran at 60 GB/s on an H200).
_BLOCK_N = 64
_MIN_KEYS_PER_SPLIT = _BLOCK_N
_MAX_SPLITS = 64
# Whether the last split program of a group merges the splits instead of a separate merge kernel.
# Off: measured on the H200 (bench_decode_kernels.py --reduce-only, B=1, ctx 1150) the fused kernel
# took 15.2 us a layer against 7.8 us for split + merge kernels: the last program's serial merge of
# its 4 heads over 33 splits costs more than the launch it saves. Bit-identical either way.
FUSED_REDUCE = False


# The block-table width and split count follow the batch's context lengths in eager steps.
@triton.jit(do_not_specialize=["block_tables_stride", "num_splits"])
def _decode_split_kernel(
    q_ptr,
    q_seq_stride,
    q_head_stride,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    block_tables_stride,
    seq_lens_ptr,
    out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    counter_ptr,
    scale_log2e,
    softcap_log2e,
    num_kv_heads,
    head_dim,
    sliding_window,
    num_splits,
    GROUP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    FUSED_REDUCE: tl.constexpr,
    BLOCK_S: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: one sequence, one KV group (all GROUP query heads as tile rows), one split.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    context_start = 0
    if USE_WINDOW:
        context_start = tl.maximum(seq_len - sliding_window, 0)
    # Splits share this sequence's own context evenly, in whole tiles; trailing splits may be empty.
    keys_per_split = tl.cdiv(tl.cdiv(seq_len - context_start, num_splits), BLOCK_N) * BLOCK_N
    split_start = context_start + split * keys_per_split
    split_end = tl.minimum(split_start + keys_per_split, seq_len)

    rows = tl.arange(0, BLOCK_G)
    row_mask = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < head_dim
    q_mask = row_mask[:, None] & dim_mask[None, :]
    q = tl.load(
        q_ptr + seq * q_seq_stride + heads[:, None] * q_head_stride + dims[None, :], mask=q_mask, other=0.0
    )
    q_positions = tl.zeros([BLOCK_G], dtype=tl.int32) + (seq_len - 1)

    block_table_ptr = block_tables_ptr + seq * block_tables_stride
    m_i, l_i, acc = attend_kv_range(
        q, k_cache_ptr, v_cache_ptr, block_table_ptr, kv_head, num_kv_heads, head_dim, split_start, split_end,
        q_positions, sliding_window, scale_log2e, softcap_log2e, dims, dim_mask,
        BLOCK_G, BLOCK_D, BLOCK_SIZE, BLOCK_N, USE_WINDOW, DOT_IN_FP32, USE_SOFTCAP,
    )  # fmt: skip

    num_q_heads = num_kv_heads * GROUP
    store_split(
        out_ptr, partial_max_ptr, partial_sum_ptr, partial_acc_ptr, seq * num_q_heads + heads, split, num_splits,
        head_dim, dims, row_mask, q_mask, m_i, l_i, acc, SINGLE_SPLIT,
    )  # fmt: skip
    if FUSED_REDUCE:  # set only with several splits
        # Every thread's stores precede the release of the one atomic (barrier + cumulativity).
        tl.debug_barrier()
        counter = counter_ptr + seq * num_kv_heads + kv_head
        if tl.atomic_add(counter, 1, sem="acq_rel") == num_splits - 1:
            first_row = seq * num_q_heads + kv_head * GROUP
            for g in range(GROUP):
                merge_splits(
                    partial_max_ptr, partial_sum_ptr, partial_acc_ptr, out_ptr, first_row + g,
                    head_dim, num_splits, BLOCK_S, BLOCK_D, num_splits,
                )  # fmt: skip
            tl.store(counter, 0)  # every split has arrived: ready for the next launch


def choose_num_splits(
    batch: int, num_kv_heads: int, max_context: int, device: torch.device, sliding_window: int | None = None
) -> int:
    """``choose_splits`` for one program per (sequence, KV head) and split; a sliding window caps
    the context a split may cover."""
    if sliding_window is not None:
        max_context = min(max_context, sliding_window)
    return choose_splits(batch * num_kv_heads, max_context, _MIN_KEYS_PER_SPLIT, _MAX_SPLITS, device)


def _launch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    num_splits: int | None,
    fused_reduce: bool | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    check_launch_layout(q, k_cache, v_cache)
    batch, num_q_heads, head_dim = q.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_q_heads // num_kv_heads
    out = torch.empty((batch, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if batch == 0:
        return out
    if num_splits is None:
        capacity = block_tables.shape[1] * block_size
        num_splits = choose_num_splits(batch, num_kv_heads, capacity, q.device, sliding_window)
    block_d = head_tile(head_dim)
    fused = num_splits > 1 and (FUSED_REDUCE if fused_reduce is None else fused_reduce)
    counters = arrival_counters(q.device, batch * num_kv_heads) if fused else seq_lens
    partial_max, partial_sum, partial_acc = partials = split_partials(out, num_splits)
    _decode_split_kernel[(batch, num_kv_heads, num_splits)](
        q,
        q.stride(0),
        q.stride(1),
        k_cache,
        v_cache,
        block_tables,
        block_tables.stride(0),
        seq_lens,
        out,
        partial_max,
        partial_sum,
        partial_acc,
        counters,
        scale * LOG2E,
        (softcap or 1.0) * LOG2E,
        num_kv_heads,
        head_dim,
        sliding_window or 0,
        num_splits,
        GROUP=group,
        BLOCK_SIZE=block_size,
        BLOCK_G=max(next_power_of_2(group), 16),
        BLOCK_N=_BLOCK_N,
        BLOCK_D=block_d,
        USE_WINDOW=sliding_window is not None,
        DOT_IN_FP32=dot_in_fp32(q.dtype),
        USE_SOFTCAP=softcap is not None,
        SINGLE_SPLIT=num_splits == 1,
        FUSED_REDUCE=fused,
        BLOCK_S=next_power_of_2(num_splits) if fused else 1,  # no variant per split count unfused
        num_warps=4,
        **launch_overlap(q.device, batch),
    )
    if num_splits > 1 and not fused:
        reduce_splits(partials, out, num_splits, block_d)
    return out


def paged_attention_decode_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    out = torch.empty_like(q)
    for b, context_len in enumerate(seq_lens.tolist()):
        keys, values = gather_context(k_cache, v_cache, block_tables[b], context_len)
        out[b : b + 1] = attend(q[b : b + 1], keys, values, context_len - 1, scale, sliding_window, softcap)
    return out


def paged_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    num_splits: int | None = None,
    fused_reduce: bool | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """``q: [B, Hq, D]``, one query per sequence -> ``[B, Hq, D]``. ``fused_reduce`` (default
    ``FUSED_REDUCE``): merge the splits in their last program rather than in a second kernel.
    ``softcap``: scores soft-capped before the softmax (``kernels/_paged.py``)."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window, softcap)
    if q.shape[0] != block_tables.shape[0]:
        raise ValueError(f"q has {q.shape[0]} rows but block_tables has {block_tables.shape[0]} sequences")
    if num_splits is not None and num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    args = (q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window)
    if use_triton(q, k_cache, v_cache, block_tables, seq_lens):
        return _launch(*args, num_splits, fused_reduce, softcap)
    return paged_attention_decode_sdpa(*args, softcap)

"""Batch-invariant paged attention: one kernel and one tile config for prefill, extend and decode.

The engine's batch-invariant mode (``EngineConfig.batch_invariant``) sends every attention call
here. The normal paths pick their work split by the step: flash SDPA for fresh prompts, split-K
flash-decoding whose split count follows the batch, and the varlen kernel whose tile height follows
the mean query length. Here every step runs ``kernels/paged_attention.py``'s varlen kernel with the
same tiles (``BLOCK_M`` query rows of ``GROUP`` heads per token, 4 warps): a query row's scores and
weighted values come from the same MMA shape wherever the row sits, and its keys are walked from
position 0 (or its window's first tile) in ``BLOCK_N``-key tiles aligned to absolute positions, with
an fp32 online softmax. Tiles a row may not see (past its position, before its window) leave its
state exactly as it was (weights 0, rescale 1), so a token attends with the same bits in a 64- or
2,048-token chunk, over keys computed earlier (prefix-cache hit) or in decode.

Keys are also cut into segments of ``SEGMENT`` absolute positions, each attended from a fresh state
and folded into the total in ascending order. A step of single-token decodes (``decode_only``) uses
that for parallelism, as flash-decoding does, without its batch-dependent split: one program per
(sequence, KV head, segment) leaves the segment's state, and a second kernel folds a row's segments in
the same order with the same arithmetic (``kernels._paged.merge_state``), so a decoded token has the
same bits as in the one-pass kernel (a chunk, or a resume that recomputes it as a prompt).
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, cdiv, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels._decode_splits import split_partials, store_split
from kernels._paged import (
    LOG2E,
    attend_kv_range,
    check_launch_layout,
    check_paged_inputs,
    dot_in_fp32,
    head_tile,
    merge_state,
)
from kernels.paged_attention import BLOCK_N, paged_attention_torch
from kernels.paged_attention import _launch as _paged_launch

__all__ = ["invariant_attention", "invariant_tiles", "paged_attention_torch"]

BLOCK_M = 64
NUM_WARPS = 4
# Keys per segment: a multiple of BLOCK_N, and a divisor of the 256 positions a sliding-window group's
# cache base is aligned to in this mode (``engine/runner/kv_sizing.py``), so segments stay absolute.
SEGMENT = 128
# The split decode's partial states are [batch, q_heads, segments, head_dim] fp32; past this size a
# decode step takes the one-pass kernel instead (same bits, less parallel).
MAX_PARTIAL_BYTES = 64 << 20
# The split decode's tile height; None: the one-pass kernel's (``invariant_tiles``). Only a value
# that gives the one-pass kernel's bits on the GPU may be set (``scripts/gpu/probe_invariant_attention.py``).
DECODE_BLOCK_M: int | None = None


def invariant_tiles(group: int) -> tuple[int, int, int]:
    """(BLOCK_Q, BLOCK_M, num_warps) for a model with ``group`` query heads per KV head: a function of
    the model alone."""
    block_m = max(BLOCK_M, next_power_of_2(group))
    return block_m // group, block_m, NUM_WARPS


def _launch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    softcap: float | None = None,
) -> torch.Tensor:
    group = q.shape[1] // k_cache.shape[2]
    return _paged_launch(
        q,
        k_cache,
        v_cache,
        block_tables,
        seq_lens,
        query_start_loc,
        scale,
        sliding_window,
        invariant_tiles(group),
        softcap,
        SEGMENT,
    )


# The batch's size and block-table width change every step: no specialization on them.
@triton.jit(do_not_specialize=["block_tables_stride", "num_slots"])
def _segment_kernel(
    q_ptr,
    q_seq_stride,
    q_head_stride,
    k_cache_ptr,
    v_cache_ptr,
    block_tables_ptr,
    block_tables_stride,
    seq_lens_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    scale_log2e,
    softcap_log2e,
    num_kv_heads,
    head_dim,
    sliding_window,
    num_slots,
    GROUP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SEGMENT: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: one sequence's single query, one KV group (its heads are the first GROUP rows of
    # the one-pass kernel's tile shape), one segment of keys: slot j is the j-th segment from the
    # first one the query can see.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    slot = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(seq_len - sliding_window, 0) // BLOCK_N * BLOCK_N
    segment_start = (kv_start // SEGMENT + slot) * SEGMENT
    if segment_start >= seq_len:
        return
    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < GROUP
    heads = kv_head * GROUP + rows
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < head_dim
    q_mask = row_mask[:, None] & dim_mask[None, :]
    q = tl.load(q_ptr + seq * q_seq_stride + heads[:, None] * q_head_stride + dims[None, :], mask=q_mask)
    q_positions = tl.zeros([BLOCK_M], dtype=tl.int32) + (seq_len - 1)
    m_s, l_s, acc_s = attend_kv_range(
        q, k_cache_ptr, v_cache_ptr, block_tables_ptr + seq * block_tables_stride, kv_head, num_kv_heads,
        head_dim, tl.maximum(segment_start, kv_start), tl.minimum(segment_start + SEGMENT, seq_len),
        q_positions, sliding_window, scale_log2e, softcap_log2e, dims, dim_mask,
        BLOCK_M, BLOCK_D, BLOCK_SIZE, BLOCK_N, USE_WINDOW, DOT_IN_FP32, USE_SOFTCAP,
    )  # fmt: skip
    store_split(
        q_ptr, partial_max_ptr, partial_sum_ptr, partial_acc_ptr, seq * (num_kv_heads * GROUP) + heads, slot,
        num_slots, head_dim, dims, row_mask, q_mask, m_s, l_s, acc_s, False,
    )  # fmt: skip


@triton.jit(do_not_specialize=["num_slots"])
def _fold_kernel(
    seq_lens_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    out_ptr,
    num_kv_heads,
    head_dim,
    sliding_window,
    num_slots,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SEGMENT: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    # One program: one sequence, one KV group; its segments folded in ascending order.
    seq = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + seq)
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(seq_len - sliding_window, 0) // BLOCK_N * BLOCK_N
    used = tl.cdiv(seq_len, SEGMENT) - kv_start // SEGMENT
    rows = tl.arange(0, BLOCK_M)
    row_mask = rows < GROUP
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < head_dim
    tile_mask = row_mask[:, None] & dim_mask[None, :]
    partial_rows = (seq * (num_kv_heads * GROUP) + kv_head * GROUP + rows) * num_slots
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for slot in range(0, used):
        m_s = tl.load(partial_max_ptr + partial_rows + slot, mask=row_mask, other=-1.0e30)
        l_s = tl.load(partial_sum_ptr + partial_rows + slot, mask=row_mask, other=0.0)
        acc_s = tl.load(
            partial_acc_ptr + (partial_rows + slot)[:, None] * head_dim + dims[None, :],
            mask=tile_mask,
            other=0.0,
        )
        m_i, l_i, acc = merge_state(m_i, l_i, acc, m_s, l_s, acc_s)
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    out_offsets = (seq * (num_kv_heads * GROUP) + kv_head * GROUP + rows)[:, None] * head_dim + dims[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=tile_mask)


def segment_slots(capacity: int, sliding_window: int | None) -> int:
    """Segment programs per (sequence, KV head) for a block table of ``capacity`` key positions: a
    host-side shape (no device sync, fixed under CUDA graphs); a window bounds what one query sees."""
    slots = cdiv(capacity, SEGMENT)
    if sliding_window is not None:
        slots = min(slots, cdiv(sliding_window + BLOCK_N, SEGMENT) + 1)
    return max(slots, 1)


def _launch_split_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    softcap: float | None,
    num_slots: int,
    block_m: int | None = None,
) -> torch.Tensor:
    """``block_m``: another tile height than the one-pass kernel's (``scripts/gpu/probe_invariant_attention.py``
    checks on a GPU whether the bits stay the same)."""
    check_launch_layout(q, k_cache, v_cache)
    batch, num_q_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    group = num_q_heads // num_kv_heads
    _, tile_m, num_warps = invariant_tiles(group)
    block_m = block_m or DECODE_BLOCK_M or tile_m
    block_d = head_tile(head_dim)
    out = torch.empty_like(q)
    partial_max, partial_sum, partial_acc = split_partials(out, num_slots)
    _segment_kernel[(batch, num_kv_heads, num_slots)](
        q, q.stride(0), q.stride(1), k_cache, v_cache, block_tables, block_tables.stride(0), seq_lens,
        partial_max, partial_sum, partial_acc, scale * LOG2E, (softcap or 1.0) * LOG2E, num_kv_heads,
        head_dim, sliding_window or 0, num_slots,
        GROUP=group, BLOCK_SIZE=block_size, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d,
        SEGMENT=SEGMENT, USE_WINDOW=sliding_window is not None, DOT_IN_FP32=dot_in_fp32(q.dtype),
        USE_SOFTCAP=softcap is not None, num_warps=num_warps, **launch_overlap(q.device, q.shape[0]),
    )  # fmt: skip
    _fold_kernel[(batch, num_kv_heads)](
        seq_lens, partial_max, partial_sum, partial_acc, out, num_kv_heads, head_dim, sliding_window or 0,
        num_slots, GROUP=group, BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_D=block_d, SEGMENT=SEGMENT,
        USE_WINDOW=sliding_window is not None, num_warps=num_warps, **launch_overlap(seq_lens.device, q.shape[0]),
    )  # fmt: skip
    return out


def split_decode_slots(
    q: torch.Tensor, block_tables: torch.Tensor, block_size: int, sliding_window: int | None
) -> int:
    """Segment slots for a decode step, or 0 where the one-pass kernel serves it better: one segment
    only, or partial states past ``MAX_PARTIAL_BYTES``."""
    slots = segment_slots(block_tables.shape[1] * block_size, sliding_window)
    partial_bytes = q.shape[0] * q.shape[1] * slots * (q.shape[2] + 2) * 4
    return slots if slots > 1 and partial_bytes <= MAX_PARTIAL_BYTES else 0


def invariant_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
    decode_only: bool = False,
) -> torch.Tensor:
    """As ``paged_attention`` (causal GQA ``[T, Hq, D]`` over a varlen batch; a decode step is one
    token per sequence; ``softcap`` likewise), with a row's bits independent of the rest of the
    launch. ``decode_only``: every sequence has exactly one query row (the split decode may run).
    Where Triton does not run, the per-sequence torch reference."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window, softcap)
    if query_start_loc.shape != (block_tables.shape[0] + 1,):
        raise ValueError(f"query_start_loc must be [batch+1], got {tuple(query_start_loc.shape)}")
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, sliding_window)
    if use_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc):
        if decode_only and q.shape[0] == block_tables.shape[0]:
            slots = split_decode_slots(q, block_tables, k_cache.shape[1], sliding_window)
            if slots:
                return _launch_split_decode(
                    q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window, softcap, slots
                )
        return _launch(*args, softcap)
    return paged_attention_torch(*args, softcap)

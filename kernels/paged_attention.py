"""Paged attention over the block KV cache for varlen token-major batches.

One kernel covers prefill, extend over a cached prefix, and decode: sequence ``b`` owns query rows
``query_start_loc[b]:query_start_loc[b+1]``; its context holds ``seq_lens[b]`` tokens whose K/V are
already in the cache, and query row ``i`` sits at position ``seq_lens[b] - q_len_b + i``.
``softcap``: scores soft-capped before the softmax (``kernels/_paged.py``).
The single-token decode op with split-K (flash-decoding) lives in ``paged_attention_decode.py``.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels._paged import (
    LOG2E,
    attend,
    attend_kv_range,
    attend_kv_segments,
    check_launch_layout,
    check_paged_inputs,
    dot_in_fp32,
    gather_context,
    head_tile,
)
from kernels.paged_attention_decode import paged_attention_decode, paged_attention_decode_torch
from kernels.paged_attention_sdpa import paged_attention_sdpa

__all__ = [
    "paged_attention",
    "paged_attention_decode",
    "paged_attention_decode_torch",
    "paged_attention_torch",
]


@triton.jit
def _find_sequence(query_start_loc_ptr, num_seqs, program, BLOCK_Q: tl.constexpr):
    """Largest ``b`` with ``query_start_loc[b] // BLOCK_Q + b <= program`` (binary search).

    Sequence ``b`` owns programs ``query_start_loc[b] // BLOCK_Q + b`` onwards, which gives every
    sequence at least ``cdiv(q_len_b, BLOCK_Q)`` programs within a grid of ``T // BLOCK_Q + B``
    that is known on the host without reading ``query_start_loc`` back from the device.
    """
    lo = 0
    hi = num_seqs - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        first_program = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if first_program <= program:
            lo = mid
        else:
            hi = mid - 1
    return lo


# The batch's size and block-table width change every step: specializing on them (== 1, % 16)
# would compile new variants mid-serving.
@triton.jit(do_not_specialize=["block_tables_stride", "num_seqs"])
def _paged_attention_kernel(
    q_ptr,
    q_token_stride,
    q_head_stride,
    k_cache_ptr,
    v_cache_ptr,
    out_ptr,
    block_tables_ptr,
    block_tables_stride,
    seq_lens_ptr,
    query_start_loc_ptr,
    scale_log2e,
    softcap_log2e,
    num_seqs,
    num_kv_heads,
    head_dim,
    sliding_window,
    GROUP: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
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
    # Rows of the tile are (query token, head of this KV group) pairs, so K/V are read once per group.
    program = tl.program_id(0)
    kv_head = tl.program_id(1)
    seq = _find_sequence(query_start_loc_ptr, num_seqs, program, BLOCK_Q)
    q_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_start
    q_offset = (program - (q_start // BLOCK_Q + seq)) * BLOCK_Q
    if q_offset >= q_len:
        return
    seq_len = tl.load(seq_lens_ptr + seq)
    prefix_len = seq_len - q_len

    rows = tl.arange(0, BLOCK_M)
    local_token = q_offset + rows // GROUP
    row_mask = (rows // GROUP < BLOCK_Q) & (local_token < q_len)
    heads = kv_head * GROUP + rows % GROUP
    dims = tl.arange(0, BLOCK_D)
    dim_mask = dims < head_dim
    tokens = (q_start + local_token).to(tl.int64)
    q_mask = row_mask[:, None] & dim_mask[None, :]
    q = tl.load(
        q_ptr + tokens[:, None] * q_token_stride + heads[:, None] * q_head_stride + dims[None, :], mask=q_mask
    )
    q_positions = prefix_len + local_token

    kv_end = prefix_len + tl.minimum(q_offset + BLOCK_Q, q_len)
    kv_start = 0
    if USE_WINDOW:
        kv_start = tl.maximum(prefix_len + q_offset - sliding_window + 1, 0) // BLOCK_N * BLOCK_N
    block_table_ptr = block_tables_ptr + seq.to(tl.int64) * block_tables_stride
    if SEGMENT > 0:
        m_i, l_i, acc = attend_kv_segments(
            q, k_cache_ptr, v_cache_ptr, block_table_ptr, kv_head, num_kv_heads, head_dim, kv_start, kv_end,
            q_positions, sliding_window, scale_log2e, softcap_log2e, dims, dim_mask,
            BLOCK_M, BLOCK_D, BLOCK_SIZE, BLOCK_N, SEGMENT, USE_WINDOW, DOT_IN_FP32, USE_SOFTCAP,
        )  # fmt: skip
    else:
        m_i, l_i, acc = attend_kv_range(
            q, k_cache_ptr, v_cache_ptr, block_table_ptr, kv_head, num_kv_heads, head_dim, kv_start, kv_end,
            q_positions, sliding_window, scale_log2e, softcap_log2e, dims, dim_mask,
            BLOCK_M, BLOCK_D, BLOCK_SIZE, BLOCK_N, USE_WINDOW, DOT_IN_FP32, USE_SOFTCAP,
        )  # fmt: skip
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    out_offsets = (
        tokens[:, None] * (num_kv_heads * GROUP * head_dim) + heads[:, None] * head_dim + dims[None, :]
    )
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=q_mask)


BLOCK_N = 64  # keys per inner tile


def _tile_sizes(num_tokens: int, num_seqs: int, group: int) -> tuple[int, int]:
    """(BLOCK_Q, BLOCK_M) from the mean query length, which the host knows without a sync."""
    mean_q_len = -(-num_tokens // max(num_seqs, 1))
    block_m = min(max(next_power_of_2(mean_q_len * group), 16), 128)
    block_m = max(block_m, next_power_of_2(group))
    return max(block_m // group, 1), block_m


def _launch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None,
    tiles: tuple[int, int, int] | None = None,
    softcap: float | None = None,
    segment: int = 0,
) -> torch.Tensor:
    """``tiles``: (BLOCK_Q, BLOCK_M, num_warps) fixed by the caller (``kernels/invariant_attention.py``)
    instead of chosen from the step's mean query length; ``segment`` > 0: keys folded in segments of
    that many positions (``attend_kv_segments``)."""
    check_launch_layout(q, k_cache, v_cache)
    num_tokens, num_q_heads, head_dim = q.shape
    num_kv_heads, block_size = k_cache.shape[2], k_cache.shape[1]
    num_seqs = block_tables.shape[0]
    group = num_q_heads // num_kv_heads
    out = torch.empty((num_tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    if num_tokens == 0 or num_seqs == 0:
        return out
    if tiles is None:
        block_q, block_m = _tile_sizes(num_tokens, num_seqs, group)
        num_warps = 8 if block_m >= 128 else 4
    else:
        block_q, block_m, num_warps = tiles
    grid = (num_tokens // block_q + num_seqs, num_kv_heads)
    _paged_attention_kernel[grid](
        q,
        q.stride(0),
        q.stride(1),
        k_cache,
        v_cache,
        out,
        block_tables,
        block_tables.stride(0),
        seq_lens,
        query_start_loc,
        scale * LOG2E,
        (softcap or 1.0) * LOG2E,
        num_seqs,
        num_kv_heads,
        head_dim,
        sliding_window or 0,
        GROUP=group,
        BLOCK_SIZE=block_size,
        BLOCK_Q=block_q,
        BLOCK_M=block_m,
        BLOCK_N=BLOCK_N,
        BLOCK_D=head_tile(head_dim),
        SEGMENT=segment,
        USE_WINDOW=sliding_window is not None,
        DOT_IN_FP32=dot_in_fp32(q.dtype),
        USE_SOFTCAP=softcap is not None,
        num_warps=num_warps,
        **launch_overlap(q.device, num_tokens),
    )
    return out


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    out = torch.empty_like(q)
    starts = query_start_loc.tolist()
    lens = seq_lens.tolist()
    for b, context_len in enumerate(lens):
        start, stop = starts[b], starts[b + 1]
        if stop == start:
            continue
        keys, values = gather_context(k_cache, v_cache, block_tables[b], context_len)
        out[start:stop] = attend(
            q[start:stop], keys, values, context_len - (stop - start), scale, sliding_window, softcap
        )
    return out


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Causal GQA attention ``[T, Hq, D]`` for every query row of a varlen batch; fp32 softmax."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window, softcap)
    batch = block_tables.shape[0]
    if query_start_loc.shape != (batch + 1,) or query_start_loc.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"query_start_loc must be int [batch+1={batch + 1}], got {tuple(query_start_loc.shape)}"
        )
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, sliding_window)
    if use_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc):
        return _launch(*args, softcap=softcap)
    return paged_attention_sdpa(*args, softcap=softcap)

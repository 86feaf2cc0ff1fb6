"""Pieces shared by the varlen and decode paged-attention ops: input checks and the torch math.

``softcap`` (Gemma-2's ``attn_logit_softcapping``): a score ``s`` (after the scale) becomes
``softcap * tanh(s / softcap)`` before the mask and the softmax, as in transformers.
"""

from __future__ import annotations

import torch

from kernels._common import cdiv, interpreting, next_power_of_2, tanh, tl, triton
from kernels.kv_cache_write import check_caches_contiguous

LOG2E = 1.4426950408889634
# Cap on one score tensor in the torch reference (elements), so a long CPU prefill stays in memory.
_MAX_SCORE_ELEMENTS = 1 << 26


def dot_in_fp32(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 or (dtype == torch.bfloat16 and interpreting())


def head_tile(head_dim: int) -> int:
    """BLOCK_D: the head dimension padded to a power of two, and to 16 for tl.dot."""
    return max(next_power_of_2(head_dim), 16)


def check_launch_layout(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """The memory layout the kernels address: q rows contiguous in head_dim, dense caches."""
    if q.stride(-1) != 1:
        raise ValueError("q must be contiguous in head_dim")
    check_caches_contiguous(k_cache, v_cache)


def check_paged_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    sliding_window: int | None,
    softcap: float | None = None,
) -> None:
    """Shape/dtype checks that need no device sync."""
    if softcap is not None and not softcap > 0:
        raise ValueError(f"softcap must be positive or None, got {softcap}")
    if q.dim() != 3:
        raise ValueError(f"q must be [tokens, q_heads, head_dim], got {tuple(q.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape:
        raise ValueError(
            f"caches must both be [blocks, block_size, kv_heads, head_dim], "
            f"got {tuple(k_cache.shape)} / {tuple(v_cache.shape)}"
        )
    num_q_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"cache head_dim {k_cache.shape[3]} != q head_dim {head_dim}")
    if num_q_heads % num_kv_heads != 0:
        raise ValueError(f"q heads ({num_q_heads}) must be a multiple of kv heads ({num_kv_heads})")
    if block_tables.dim() != 2 or block_tables.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"block_tables must be int [batch, max_blocks], got {tuple(block_tables.shape)}")
    batch = block_tables.shape[0]
    if seq_lens.shape != (batch,) or seq_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seq_lens must be int [batch={batch}], got {tuple(seq_lens.shape)}")
    if sliding_window is not None and sliding_window <= 0:
        raise ValueError(f"sliding_window must be positive or None, got {sliding_window}")


def gather_pages(cache: torch.Tensor, block_table: torch.Tensor, context_len: int) -> torch.Tensor:
    """One sequence's first ``context_len`` token rows of a paged ``cache: [blocks, block_size, ...]``."""
    pages = block_table[: cdiv(context_len, cache.shape[1])].long()
    return cache.index_select(0, pages).flatten(0, 1)[:context_len]


def gather_context(
    k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor, context_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's first ``context_len`` keys and values, each ``[context_len, kv_heads, head_dim]``."""
    return gather_pages(k_cache, block_table, context_len), gather_pages(v_cache, block_table, context_len)


def attend(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    first_position: int,
    scale: float,
    sliding_window: int | None,
    softcap: float | None = None,
    first_key: int = 0,
) -> torch.Tensor:
    """Causal GQA attention of ``q: [n, Hq, D]`` (positions ``first_position + i``) over ``keys``
    (positions ``first_key + j``).

    Computed in fp32 and returned in ``q.dtype``. Query heads are viewed as ``[Hk, G]`` so each
    KV head is broadcast to its group instead of being copied G times.
    """
    n, num_q_heads, head_dim = q.shape
    context_len, num_kv_heads = keys.shape[0], keys.shape[1]
    group = num_q_heads // num_kv_heads
    k = keys.float().permute(1, 2, 0).unsqueeze(1)  # [Hk, 1, D, L]
    v = values.float().permute(1, 0, 2).unsqueeze(1)  # [Hk, 1, L, D]
    key_positions = torch.arange(first_key, first_key + context_len, device=q.device)
    out = torch.empty_like(q)
    rows_per_chunk = max(1, _MAX_SCORE_ELEMENTS // max(1, num_q_heads * context_len))
    for start in range(0, n, rows_per_chunk):
        stop = min(n, start + rows_per_chunk)
        qf = q[start:stop].float().view(stop - start, num_kv_heads, group, head_dim).permute(1, 2, 0, 3)
        scores = torch.matmul(qf, k) * scale  # [Hk, G, rows, L]
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        query_positions = first_position + torch.arange(start, stop, device=q.device)
        allowed = key_positions[None, :] <= query_positions[:, None]
        if sliding_window is not None:
            allowed &= key_positions[None, :] > query_positions[:, None] - sliding_window
        scores.masked_fill_(~allowed, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        chunk = torch.matmul(probs, v)  # [Hk, G, rows, D]
        out[start:stop] = chunk.permute(2, 0, 1, 3).reshape(stop - start, num_q_heads, head_dim).to(q.dtype)
    return out


@triton.jit
def dot(a, b, DOT_IN_FP32: tl.constexpr):
    """``tl.dot`` with exact fp32 products when ``DOT_IN_FP32`` (fp32 inputs, or bf16 under the
    interpreter, whose bf16 ``tl.dot`` returns garbage in Triton 3.9)."""
    if DOT_IN_FP32:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b)


@triton.jit
def soft_cap(scores, softcap_log2e):
    """``softcap * tanh(s / softcap)`` of log2-domain scores ``s * log2(e)``, given
    ``softcap * log2(e)``: the same cap, scaled like the scores."""
    return softcap_log2e * tanh(scores / softcap_log2e)


@triton.jit
def softmax_step(scores, m_i, l_i):
    """One tile's online-softmax update from log2-domain ``scores: [M, N]``: the tile's weights
    ``p``, the factor ``alpha`` that rescales what was accumulated before, and the new ``(m, l)``."""
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    p = tl.exp2(scores - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    return p, alpha, m_new, l_i * alpha + tl.sum(p, axis=1)


@triton.jit
def tile_slots(block_table_ptr, start_n, end, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """The token positions ``start_n .. start_n + BLOCK_N - 1`` of one sequence, the mask of those
    before ``end``, and their cache slots (int64) through the sequence's block table."""
    positions = start_n + tl.arange(0, BLOCK_N)
    mask = positions < end
    pages = tl.load(block_table_ptr + positions // BLOCK_SIZE, mask=mask, other=0).to(tl.int64)
    return positions, mask, pages * BLOCK_SIZE + positions % BLOCK_SIZE


@triton.jit
def attend_kv_range(
    q,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    kv_head,
    num_kv_heads,
    head_dim,
    kv_start,
    kv_end,
    q_positions,
    sliding_window,
    scale_log2e,
    softcap_log2e,
    dims,
    dim_mask,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
):
    """The online-softmax state ``(m, l, acc)`` of ``q: [BLOCK_M, BLOCK_D]`` over the key positions
    ``kv_start .. kv_end``, one tile of ``BLOCK_N`` keys after another in ascending order.

    Keys are gathered through the block table, so a tile may span several cache blocks. ``m_i`` is
    kept in the log2 domain; rows with nothing allowed yet keep the finite sentinel -1e30 so no
    ``-inf - -inf`` NaN appears. ``DOT_IN_FP32``: as ``dot``'s. ``USE_SOFTCAP``: the scores are
    capped (``soft_cap``) before the mask.
    """
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for start_n in range(kv_start, kv_end, BLOCK_N):
        key_positions, key_mask, slots = tile_slots(block_table_ptr, start_n, kv_end, BLOCK_SIZE, BLOCK_N)
        offsets = slots * (num_kv_heads * head_dim) + kv_head * head_dim
        kv_mask = key_mask[None, :] & dim_mask[:, None]
        k = tl.load(k_cache_ptr + offsets[None, :] + dims[:, None], mask=kv_mask, other=0.0)  # [D, N]
        qk = dot(q, k, DOT_IN_FP32) * scale_log2e
        if USE_SOFTCAP:
            qk = soft_cap(qk, softcap_log2e)
        allowed = key_mask[None, :] & (key_positions[None, :] <= q_positions[:, None])
        if USE_WINDOW:
            allowed = allowed & (key_positions[None, :] > q_positions[:, None] - sliding_window)
        qk = tl.where(allowed, qk, float("-inf"))
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i)
        v = tl.load(
            v_cache_ptr + offsets[:, None] + dims[None, :],
            mask=key_mask[:, None] & dim_mask[None, :],
            other=0.0,
        )  # [N, D]
        acc = acc * alpha[:, None] + dot(p.to(v.dtype), v, DOT_IN_FP32)
    return m_i, l_i, acc


@triton.jit
def merge_state(m_i, l_i, acc, m_s, l_s, acc_s):
    """Fold one key segment's online-softmax state ``(m_s, l_s, acc_s)`` into the running
    ``(m_i, l_i, acc)``. Merging an empty segment (``m_s`` the -1e30 sentinel, nothing summed) leaves
    the running state's bits as they were, and an empty running state takes the segment's exactly."""
    m_new = tl.maximum(m_i, m_s)
    alpha = tl.exp2(m_i - m_new)
    beta = tl.exp2(m_s - m_new)
    return m_new, l_i * alpha + l_s * beta, acc * alpha[:, None] + acc_s * beta[:, None]


@triton.jit
def attend_kv_segments(
    q,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    kv_head,
    num_kv_heads,
    head_dim,
    kv_start,
    kv_end,
    q_positions,
    sliding_window,
    scale_log2e,
    softcap_log2e,
    dims,
    dim_mask,
    BLOCK_M: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SEGMENT: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    USE_SOFTCAP: tl.constexpr,
):
    """As ``attend_kv_range``, but the keys are cut at absolute positions that are multiples of
    ``SEGMENT``: each segment's state starts fresh and is folded into the total in ascending order
    (``merge_state``). A split decode that attends each segment in its own program and folds the
    segments in a second kernel (``kernels/invariant_attention.py``) gives the same bits."""
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for segment_start in range(kv_start // SEGMENT * SEGMENT, kv_end, SEGMENT):
        m_s, l_s, acc_s = attend_kv_range(
            q, k_cache_ptr, v_cache_ptr, block_table_ptr, kv_head, num_kv_heads, head_dim,
            tl.maximum(segment_start, kv_start), tl.minimum(segment_start + SEGMENT, kv_end),
            q_positions, sliding_window, scale_log2e, softcap_log2e, dims, dim_mask,
            BLOCK_M, BLOCK_D, BLOCK_SIZE, BLOCK_N, USE_WINDOW, DOT_IN_FP32, USE_SOFTCAP,
        )  # fmt: skip
        m_i, l_i, acc = merge_state(m_i, l_i, acc, m_s, l_s, acc_s)
    return m_i, l_i, acc

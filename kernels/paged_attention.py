"""Paged attention over the block KV cache for varlen token-major batches.

One kernel covers prefill, extend over a cached prefix, and decode: sequence ``b`` owns query rows
``query_start_loc[b]:query_start_loc[b+1]``; its context holds ``seq_lens[b]`` tokens whose K/V are
already in the cache, and query row ``i`` sits at position ``seq_lens[b] - q_len_b + i``.
The single-token decode op with split-K (flash-decoding) lives in ``paged_attention_decode.py``.
"""

from __future__ import annotations

import torch

from kernels._paged import attend, check_paged_inputs, gather_context
from kernels.paged_attention_decode import paged_attention_decode, paged_attention_decode_torch

__all__ = [
    "paged_attention",
    "paged_attention_decode",
    "paged_attention_decode_torch",
    "paged_attention_torch",
]


def paged_attention_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
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
            q[start:stop], keys, values, context_len - (stop - start), scale, sliding_window
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
) -> torch.Tensor:
    """Causal GQA attention ``[T, Hq, D]`` for every query row of a varlen batch; fp32 softmax."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window)
    batch = block_tables.shape[0]
    if query_start_loc.shape != (batch + 1,) or query_start_loc.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"query_start_loc must be int [batch+1={batch + 1}], got {tuple(query_start_loc.shape)}"
        )
    return paged_attention_torch(
        q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, sliding_window
    )

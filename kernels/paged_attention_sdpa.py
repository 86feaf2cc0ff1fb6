"""Paged attention through torch's fused ``scaled_dot_product_attention``: the path for devices
without Triton (CPU replicas, the demo).

The references in ``_paged.py`` (``attend``) spell the math out op by op; on a CPU that cost more
than the rest of a decode step. Here each sequence is one fused call over exactly the keys it may
see (its window's blocks only), so no mask is needed for a decode row or a fresh prompt. Sequences
are never padded into one batched call: the CPU kernel's reduction blocks follow the key count, so
padding to the batch's longest context would make a row's bits depend on its neighbours.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["paged_attention_decode_sdpa", "paged_attention_sdpa"]


def _context(cache: torch.Tensor, table: torch.Tensor, first: int, stop: int) -> torch.Tensor:
    """Keys (or values) at positions ``first:stop`` of one sequence as ``[1, Hk, stop - first, D]``."""
    block_size = cache.shape[1]
    first_block, end_block = first // block_size, -(-stop // block_size)
    # index_select copies pages several times faster than advanced indexing on a CPU.
    pages = cache.index_select(0, table[first_block:end_block].long())
    rows = pages.flatten(0, 1)[first - first_block * block_size : stop - first_block * block_size]
    return rows.transpose(0, 1).unsqueeze(0)


def _attend_one(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    context_len: int,
    scale: float,
    sliding_window: int | None,
) -> torch.Tensor:
    """``q: [n, Hq, D]``, the last ``n`` positions of a ``context_len``-token sequence -> ``[n, Hq, D]``."""
    n = q.shape[0]
    prefix = context_len - n
    first = 0 if sliding_window is None else max(0, prefix - sliding_window + 1)
    keys = _context(k_cache, table, first, context_len)
    values = _context(v_cache, table, first, context_len)
    mask, causal = None, False
    if n > 1:
        if first == 0 and prefix == 0 and sliding_window is None:
            causal = True  # torch's causal mask is aligned top-left: right only for a fresh prompt
        else:
            key_positions = torch.arange(first, context_len, device=q.device)
            query_positions = torch.arange(prefix, context_len, device=q.device).unsqueeze(1)
            mask = key_positions <= query_positions
            if sliding_window is not None:
                mask &= key_positions > query_positions - sliding_window
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1).unsqueeze(0),
        keys,
        values,
        attn_mask=mask,
        is_causal=causal,
        scale=scale,
        enable_gqa=q.shape[1] != keys.shape[1],
    )
    return out[0].transpose(0, 1)


def paged_attention_decode_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """``q: [B, Hq, D]``, one query per sequence at position ``seq_lens[b] - 1`` -> ``[B, Hq, D]``."""
    out = torch.empty_like(q)
    for b, context_len in enumerate(seq_lens.tolist()):
        out[b : b + 1] = _attend_one(
            q[b : b + 1], k_cache, v_cache, block_tables[b], context_len, scale, sliding_window
        )
    return out


def paged_attention_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start_loc: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """Causal GQA attention ``[T, Hq, D]`` for a varlen batch (prefill, extend over a cached prefix,
    decode rows)."""
    out = torch.empty_like(q)
    starts = query_start_loc.tolist()
    for b, context_len in enumerate(seq_lens.tolist()):
        start, stop = starts[b], starts[b + 1]
        if stop > start:
            out[start:stop] = _attend_one(
                q[start:stop], k_cache, v_cache, block_tables[b], context_len, scale, sliding_window
            )
    return out

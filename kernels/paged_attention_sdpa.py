"""Paged attention through torch's fused ``scaled_dot_product_attention``: the path for devices
without Triton (CPU replicas, the demo).

The references in ``_paged.py`` (``attend``) spell the math out op by op; on a CPU that cost more
than the rest of a decode step. Here each sequence is one fused call over exactly the keys it may
see (its window's blocks only), so no mask is needed for a decode row or a fresh prompt. Sequences
are never padded into one batched call: the CPU kernel's reduction blocks follow the key count, so
padding to the batch's longest context would make a row's bits depend on its neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True)
class _DecodeGather:
    """Where a decode step's rows find their keys: the blocks of every row in one index (so each
    layer gathers its pages with one ``index_select``), and each row's key range in the result."""

    block_tables: torch.Tensor  # the step's tensors this plan was made from (kept: compared by
    seq_lens: torch.Tensor  # identity, which needs them alive)
    versions: tuple[int, int]  # their version counters then: static buffers are rewritten in place
    sliding_window: int | None
    block_ids: torch.Tensor  # int64 [sum of rows' blocks]
    ranges: list[tuple[int, int]]  # per row: (first, stop) into the gathered [tokens, Hk, D]


_last_plan: _DecodeGather | None = None


def _decode_gather(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int, sliding_window: int | None
) -> _DecodeGather:
    """The plan for this step; every layer of the step passes the same tensors, so it is made once."""
    global _last_plan
    plan = _last_plan
    if (
        plan is not None
        and plan.block_tables is block_tables
        and plan.seq_lens is seq_lens
        and plan.versions == (block_tables._version, seq_lens._version)
        and plan.sliding_window == sliding_window
    ):
        return plan
    tables, pieces, ranges, gathered = block_tables.tolist(), [], [], 0
    for row, context_len in enumerate(seq_lens.tolist()):
        first = 0 if sliding_window is None else max(0, context_len - sliding_window)
        first_block, end_block = first // block_size, -(-context_len // block_size)
        pieces.extend(tables[row][first_block:end_block])
        start = gathered * block_size
        ranges.append(
            (start + first - first_block * block_size, start + context_len - first_block * block_size)
        )
        gathered += end_block - first_block
    block_ids = torch.tensor(pieces, dtype=torch.int64, device=block_tables.device)
    versions = (block_tables._version, seq_lens._version)
    _last_plan = _DecodeGather(block_tables, seq_lens, versions, sliding_window, block_ids, ranges)
    return _last_plan


def paged_attention_decode_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """``q: [B, Hq, D]``, one query per sequence at position ``seq_lens[b] - 1`` -> ``[B, Hq, D]``.

    Each row is still its own call over exactly its keys (same shapes and strides as alone)."""
    if q.shape[0] == 0:
        return torch.empty_like(q)
    plan = _decode_gather(block_tables, seq_lens, k_cache.shape[1], sliding_window)
    keys = k_cache.index_select(0, plan.block_ids).flatten(0, 1)  # [tokens, Hk, D]
    values = v_cache.index_select(0, plan.block_ids).flatten(0, 1)
    queries = q.unsqueeze(2)  # [B, Hq, 1, D]
    gqa = q.shape[1] != k_cache.shape[2]
    rows = [
        F.scaled_dot_product_attention(
            queries[b : b + 1],
            keys[first:stop].transpose(0, 1).unsqueeze(0),
            values[first:stop].transpose(0, 1).unsqueeze(0),
            scale=scale,
            enable_gqa=gqa,
        )
        for b, (first, stop) in enumerate(plan.ranges)
    ]
    return torch.cat(rows).squeeze(2)


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

"""Paged attention in torch: the path for devices without Triton (CPU replicas, the demo).

Each sequence is one call over the keys it may see, never padded into one batched call with its
neighbours (so a row's bits never follow its neighbours'). The call is torch's fused
``scaled_dot_product_attention``, or in batch-invariant mode (``kernels.invariance``)
``kernels.cpu_invariant.attend`` over the keys from the ``KEY_BLOCK``-aligned position before the
window on: ``attend`` walks the keys in fixed position-aligned blocks, so a row's bits are also the
same as a decode row, in a chunk of its prompt and after a cached prefix, where the fused kernel
sizes its reduction blocks by the call's query and key counts (and is the faster one).

Soft-capped scores (``softcap``, Gemma-2) are no option of the fused kernel: outside batch-invariant
mode those calls run ``kernels._paged.attend``, the same per-sequence torch math in fp32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kernels._paged import attend as attend_capped
from kernels.cpu_invariant import KEY_BLOCK, attend
from kernels.invariance import batch_invariant
from kernels.step_memo import StepMemo

__all__ = ["paged_attention_decode_sdpa", "paged_attention_sdpa"]


def _first_key(context_len: int, num_queries: int, sliding_window: int | None, invariant: bool) -> int:
    """The first key any of the last ``num_queries`` positions of a ``context_len``-token sequence
    may see; for ``attend`` (``invariant``) the ``KEY_BLOCK``-aligned position before it."""
    if sliding_window is None:
        return 0
    first = max(0, context_len - num_queries - sliding_window + 1)
    return first // KEY_BLOCK * KEY_BLOCK if invariant else first


def _fused(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    first: int,
    context_len: int,
    scale: float,
    sliding_window: int | None,
) -> torch.Tensor:
    """torch's fused attention of ``q: [n, Hq, D]``, the last ``n`` positions, over ``keys``/``values``
    ``[context_len - first, Hk, D]`` (exactly the keys some row may see) -> ``[n, Hq, D]``."""
    n = q.shape[0]
    prefix = context_len - n
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
        keys.transpose(0, 1).unsqueeze(0),
        values.transpose(0, 1).unsqueeze(0),
        attn_mask=mask,
        is_causal=causal,
        scale=scale,
        enable_gqa=q.shape[1] != keys.shape[1],
    )
    return out[0].transpose(0, 1)


def _context(cache: torch.Tensor, table: torch.Tensor, first: int, stop: int) -> torch.Tensor:
    """Keys (or values) at positions ``first:stop`` of one sequence as ``[stop - first, Hk, D]``."""
    block_size = cache.shape[1]
    first_block, end_block = first // block_size, -(-stop // block_size)
    # index_select copies pages several times faster than advanced indexing on a CPU.
    pages = cache.index_select(0, table[first_block:end_block].long())
    return pages.flatten(0, 1)[first - first_block * block_size : stop - first_block * block_size]


def _attend_one(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    table: torch.Tensor,
    context_len: int,
    scale: float,
    sliding_window: int | None,
    softcap: float | None,
) -> torch.Tensor:
    """``q: [n, Hq, D]``, the last ``n`` positions of a ``context_len``-token sequence -> ``[n, Hq, D]``."""
    invariant = batch_invariant()
    first = _first_key(context_len, q.shape[0], sliding_window, invariant)
    keys = _context(k_cache, table, first, context_len)
    values = _context(v_cache, table, first, context_len)
    if invariant:
        return attend(q, keys, values, scale, sliding_window, first, softcap)
    if softcap is not None:
        n = q.shape[0]
        return attend_capped(q, keys, values, context_len - n, scale, sliding_window, softcap, first)
    return _fused(q, keys, values, first, context_len, scale, sliding_window)


@dataclass(frozen=True)
class _DecodeGather:
    """Where a decode step's rows find their keys: the blocks of every row in one index (so each
    layer gathers its pages with one ``index_select``), and each row's key range in the result."""

    invariant: bool  # made for attend (block-aligned first keys) or the fused kernel
    block_ids: torch.Tensor  # int64 [sum of rows' blocks]
    ranges: list[tuple[int, int]]  # per row: (first, stop) into the gathered [tokens, Hk, D]
    first_keys: list[int]  # per row: the position of its first gathered key
    # Per row, where its keys start among the cache's slots when its blocks are consecutive (the
    # cache itself is then the gathered keys: no copy); None when some row's are not.
    first_slots: list[int] | None


def _plan(
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    sliding_window: int | None,
    invariant: bool,
) -> _DecodeGather:
    tables, pieces, ranges, first_keys, gathered = block_tables.tolist(), [], [], [], 0
    first_slots: list[int] | None = []
    for row, context_len in enumerate(seq_lens.tolist()):
        first = _first_key(context_len, 1, sliding_window, invariant)
        first_keys.append(first)
        first_block, end_block = first // block_size, -(-context_len // block_size)
        blocks = tables[row][first_block:end_block]
        pieces.extend(blocks)
        if first_slots is not None and blocks and blocks == list(range(blocks[0], blocks[0] + len(blocks))):
            first_slots.append(blocks[0] * block_size + first - first_block * block_size)
        else:
            first_slots = None
        start = gathered * block_size
        ranges.append(
            (start + first - first_block * block_size, start + context_len - first_block * block_size)
        )
        gathered += end_block - first_block
    block_ids = torch.tensor(pieces, dtype=torch.int64, device=block_tables.device)
    return _DecodeGather(invariant, block_ids, ranges, first_keys, first_slots)


_step_plan = StepMemo(_plan, tensors=2)  # every layer of a step passes the same tensors


def _decode_gather(
    block_tables: torch.Tensor, seq_lens: torch.Tensor, block_size: int, sliding_window: int | None
) -> _DecodeGather:
    """The plan for this step, made once for all of its layers."""
    return _step_plan(block_tables, seq_lens, block_size, sliding_window, batch_invariant())


def paged_attention_decode_sdpa(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """``q: [B, Hq, D]``, one query per sequence at position ``seq_lens[b] - 1`` -> ``[B, Hq, D]``.

    Each row is still its own call over exactly its keys (same shapes and strides as alone)."""
    if q.shape[0] == 0:
        return torch.empty_like(q)
    plan = _decode_gather(block_tables, seq_lens, k_cache.shape[1], sliding_window)
    if not plan.invariant and softcap is None:
        return _decode_fused(q, k_cache, v_cache, plan, scale)
    keys = k_cache.index_select(0, plan.block_ids).flatten(0, 1)  # [tokens, Hk, D]
    values = v_cache.index_select(0, plan.block_ids).flatten(0, 1)
    if plan.invariant:
        rows = [
            attend(
                q[b : b + 1], keys[first:stop], values[first:stop], scale, sliding_window, first_key, softcap
            )
            for b, ((first, stop), first_key) in enumerate(zip(plan.ranges, plan.first_keys, strict=True))
        ]
        return torch.cat(rows)
    rows = [  # soft-capped scores
        attend_capped(
            q[b : b + 1],
            keys[first:stop],
            values[first:stop],
            first_key + stop - first - 1,  # the row's own position, seq_lens[b] - 1
            scale,
            sliding_window,
            softcap,
            first_key,
        )
        for b, ((first, stop), first_key) in enumerate(zip(plan.ranges, plan.first_keys, strict=True))
    ]
    return torch.cat(rows)


def _decode_fused(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, plan: _DecodeGather, scale: float
) -> torch.Tensor:
    """The fused kernel's decode rows, each over a ``[1, Hk, n, D]`` view of exactly its keys and
    values (one op each, where a flatten, a slice, a transpose and an unsqueeze took four): where
    every row's blocks are consecutive the views lie in the cache itself (no gather), else in the
    gathered pages. The same elements in the same order either way (same bits)."""
    kv_heads, head_dim = k_cache.shape[2:]
    if plan.first_slots is not None and k_cache.is_contiguous() and v_cache.is_contiguous():
        keys, values, starts = k_cache, v_cache, plan.first_slots
    else:
        keys = k_cache.index_select(0, plan.block_ids)  # [blocks, block_size, Hk, D], contiguous
        values = v_cache.index_select(0, plan.block_ids)
        starts = [first for first, _ in plan.ranges]
    slot = kv_heads * head_dim
    gqa = q.shape[1] != kv_heads
    queries = q.unsqueeze(2)  # [B, Hq, 1, D]
    rows = []
    for b, ((first, stop), start) in enumerate(zip(plan.ranges, starts, strict=True)):
        n = stop - first
        shape, strides = (1, kv_heads, n, head_dim), (n * slot, head_dim, slot, 1)
        rows.append(
            F.scaled_dot_product_attention(
                queries if len(plan.ranges) == 1 else queries[b : b + 1],
                keys.as_strided(shape, strides, keys.storage_offset() + start * slot),
                values.as_strided(shape, strides, values.storage_offset() + start * slot),
                scale=scale,
                enable_gqa=gqa,
            )
        )
    return (rows[0] if len(rows) == 1 else torch.cat(rows)).squeeze(2)


def paged_attention_sdpa(
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
    """Causal GQA attention ``[T, Hq, D]`` for a varlen batch (prefill, extend over a cached prefix,
    decode rows); ``softcap``: scores soft-capped before the softmax."""
    out = torch.empty_like(q)
    starts = query_start_loc.tolist()
    for b, context_len in enumerate(seq_lens.tolist()):
        start, stop = starts[b], starts[b + 1]
        if stop > start:
            out[start:stop] = _attend_one(
                q[start:stop], k_cache, v_cache, block_tables[b], context_len, scale, sliding_window, softcap
            )
    return out

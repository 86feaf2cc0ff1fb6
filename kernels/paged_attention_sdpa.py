"""Paged attention in torch: the path for devices without Triton (CPU replicas, the demo).

Each sequence is one call of ``kernels.cpu_invariant.attend`` over the keys it may see (from the
``KEY_BLOCK``-aligned position before its window on), never padded into one batched call with its
neighbours. ``attend`` walks the keys in fixed position-aligned blocks, so a row's bits are the same
as a decode row, in a chunk of its prompt, after a cached prefix or beside any other request (torch's
fused CPU attention, used here before, sizes its reduction blocks by the call's query and key counts).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernels.cpu_invariant import KEY_BLOCK, attend

__all__ = ["paged_attention_decode_sdpa", "paged_attention_sdpa"]


def _first_key(context_len: int, num_queries: int, sliding_window: int | None) -> int:
    """The ``KEY_BLOCK``-aligned position before the first key any of the last ``num_queries``
    positions of a ``context_len``-token sequence may see."""
    if sliding_window is None:
        return 0
    return max(0, context_len - num_queries - sliding_window + 1) // KEY_BLOCK * KEY_BLOCK


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
) -> torch.Tensor:
    """``q: [n, Hq, D]``, the last ``n`` positions of a ``context_len``-token sequence -> ``[n, Hq, D]``."""
    first = _first_key(context_len, q.shape[0], sliding_window)
    keys = _context(k_cache, table, first, context_len)
    values = _context(v_cache, table, first, context_len)
    return attend(q, keys, values, scale, sliding_window, first)


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
    first_keys: list[int]  # per row: the position of its first gathered key


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
    tables, pieces, ranges, first_keys, gathered = block_tables.tolist(), [], [], [], 0
    for row, context_len in enumerate(seq_lens.tolist()):
        first = _first_key(context_len, 1, sliding_window)
        first_keys.append(first)
        first_block, end_block = first // block_size, -(-context_len // block_size)
        pieces.extend(tables[row][first_block:end_block])
        start = gathered * block_size
        ranges.append(
            (start + first - first_block * block_size, start + context_len - first_block * block_size)
        )
        gathered += end_block - first_block
    block_ids = torch.tensor(pieces, dtype=torch.int64, device=block_tables.device)
    versions = (block_tables._version, seq_lens._version)
    _last_plan = _DecodeGather(
        block_tables, seq_lens, versions, sliding_window, block_ids, ranges, first_keys
    )
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
    rows = [
        attend(q[b : b + 1], keys[first:stop], values[first:stop], scale, sliding_window, first_key)
        for b, ((first, stop), first_key) in enumerate(zip(plan.ranges, plan.first_keys, strict=True))
    ]
    return torch.cat(rows)


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

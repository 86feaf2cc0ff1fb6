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
"""

from __future__ import annotations

import torch

from kernels._common import next_power_of_2, use_triton
from kernels._paged import check_paged_inputs
from kernels.paged_attention import _launch as _paged_launch
from kernels.paged_attention import paged_attention_torch

__all__ = ["invariant_attention", "invariant_tiles", "paged_attention_torch"]

BLOCK_M = 64
NUM_WARPS = 4


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
    )


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
) -> torch.Tensor:
    """As ``paged_attention`` (causal GQA ``[T, Hq, D]`` over a varlen batch; a decode step is one
    token per sequence; ``softcap`` likewise), with a row's bits independent of the rest of the
    launch. Where Triton does not run, the per-sequence torch reference."""
    check_paged_inputs(q, k_cache, v_cache, block_tables, seq_lens, sliding_window, softcap)
    if query_start_loc.shape != (block_tables.shape[0] + 1,):
        raise ValueError(f"query_start_loc must be [batch+1], got {tuple(query_start_loc.shape)}")
    args = (q, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, sliding_window)
    if use_triton(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc):
        return _launch(*args, softcap)
    return paged_attention_torch(*args, softcap)

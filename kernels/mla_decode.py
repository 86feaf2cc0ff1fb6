"""Multi-head latent attention decode over a paged latent cache (the absorbed-weight formulation).

Cache layout per layer: ``[num_blocks, block_size, R + P]``: each token's compressed KV latent ``c``
(its first R values, the key's no-rope part and the value at once, shared by every head) followed
by its rotated key part ``k_rope`` (P values). For one query head ``h`` of sequence ``b``:
``score(t) = (q_latent[b, h] . c_t + q_rope[b, h] . k_rope_t) * scale`` and
``out[b, h] = softmax_t(score) . c_t`` over the sequence's tokens ``0 .. seq_lens[b] - 1``.

The Triton path is flash-decoding: one program per (sequence, group of heads, split of the
sequence) runs an online softmax over its tokens, gathering them through the block table; every
head of the group shares each latent tile it loads. With more than one split, the fp32 partial
states are merged by ``kernels._decode_splits``' reduce kernel (``R`` as the head dimension), as
paged attention's are. The engine fills the cache with ``kernels/latent_rope_write.py`` (norm, rotary
and write in one pass); ``write_latent`` (``kernels/latent_cache_write.py``) writes given rows.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._common import await_inputs, cdiv, launch_overlap, next_power_of_2, tl, triton, use_triton
from kernels._decode_splits import (
    choose_splits,
    keys_per_split,
    reduce_splits,
    split_partials,
    store_split,
)
from kernels._paged import LOG2E, dot, dot_in_fp32, gather_pages, head_tile, softmax_step, tile_slots
from kernels.latent_cache_write import write_latent

__all__ = [
    "MlaDecodeTiles",
    "check_mla_inputs",
    "gather_latents",
    "mla_decode",
    "mla_decode_reference",
    "write_latent",
]


def check_mla_inputs(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
) -> None:
    if q_latent.dim() != 3 or q_rope.dim() != 3 or q_rope.shape[:2] != q_latent.shape[:2]:
        raise ValueError(
            f"q_latent/q_rope must be [batch, heads, R] / [batch, heads, P], "
            f"got {tuple(q_latent.shape)} / {tuple(q_rope.shape)}"
        )
    batch, _, rank = q_latent.shape
    rope_dim = q_rope.shape[2]
    if latent_cache.dim() != 3 or latent_cache.shape[2] != rank + rope_dim:
        raise ValueError(
            f"latent_cache must be [blocks, block_size, R + P = {rank + rope_dim}], got {tuple(latent_cache.shape)}"
        )
    if not latent_cache.is_contiguous():
        raise ValueError("latent_cache must be contiguous")
    if (
        block_tables.dim() != 2
        or block_tables.shape[0] != batch
        or block_tables.dtype not in (torch.int32, torch.int64)
    ):
        raise ValueError(
            f"block_tables must be int [batch={batch}, max_blocks], got {tuple(block_tables.shape)}"
        )
    if seq_lens.shape != (batch,) or seq_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seq_lens must be int [batch={batch}], got {tuple(seq_lens.shape)}")


class MlaDecodeTiles(NamedTuple):
    """Tokens per inner-loop tile, warps and software-pipeline stages of the split kernel (stages
    None: Triton's default), and the fewest keys a split is given (of the block tables' capacity,
    which sets the split count on the host). ``split_floor`` > 0: also the fewest of the sequence's
    own keys a split takes, on the device (rounded up to whole tiles), so that a short context in a
    CUDA graph's wide tables leaves the splits past its last key empty: they store nothing and the
    reduce reads only the others. 0: every split shares the sequence's keys and stores a state."""

    block_n: int = 32
    num_warps: int = 8
    num_stages: int | None = None
    min_keys_per_split: int = 64
    split_floor: int = 0


DEFAULT_TILES = MlaDecodeTiles()
# From 16 sequences on, 4 warps: 1.16-1.21x faster than 8 at batch 32-256 on an H200
# (scripts/gpu/tune_mla_decode.py, docs/performance.md); below, the default stays.
LARGE_BATCH_TILES = MlaDecodeTiles(num_warps=4)
LARGE_BATCH = 16


_small_batch_split_floor = 0  # EngineConfig.mla_split_floor, set by engine/switches.py


def set_split_floor(keys: int) -> int:
    """Below ``LARGE_BATCH`` sequences, give each split at least ``keys`` of the sequence's own keys
    (``MlaDecodeTiles.split_floor``; 0: off); returns the previous setting."""
    global _small_batch_split_floor
    if not isinstance(keys, int) or isinstance(keys, bool) or keys < 0:
        raise ValueError(f"the MLA split floor must be 0 or more keys, got {keys!r}")
    previous, _small_batch_split_floor = _small_batch_split_floor, keys
    return previous


def split_floor() -> int:
    return _small_batch_split_floor


def default_tiles(batch: int) -> MlaDecodeTiles:
    if batch >= LARGE_BATCH:
        return LARGE_BATCH_TILES
    if _small_batch_split_floor:
        return DEFAULT_TILES._replace(split_floor=_small_batch_split_floor)
    return DEFAULT_TILES


_MAX_SPLITS = 64
# Query heads per program: 16 is the smallest tl.dot tile and DeepSeek-V2-Lite's whole head count,
# so each latent tile is read once.
_HEADS_PER_PROGRAM = 16


# The block-table width and split count follow the batch's context lengths in eager steps.
@triton.jit(do_not_specialize=["block_tables_stride", "num_splits"])
def _mla_split_kernel(
    q_latent_ptr,
    q_latent_stride_b,
    q_latent_stride_h,
    q_rope_ptr,
    q_rope_stride_b,
    q_rope_stride_h,
    cache_ptr,
    block_tables_ptr,
    block_tables_stride,
    seq_lens_ptr,
    out_ptr,
    partial_max_ptr,
    partial_sum_ptr,
    partial_acc_ptr,
    scale_log2e,
    num_heads,
    rank,
    rope_dim,
    num_splits,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    DOT_IN_FP32: tl.constexpr,
    SINGLE_SPLIT: tl.constexpr,
    SPLIT_FLOOR: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    seq = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    seq_len = tl.load(seq_lens_ptr + seq)
    # Splits share this sequence's own tokens evenly, in whole tiles; trailing splits may be empty.
    split_keys = keys_per_split(seq_len, num_splits, BLOCK_N, SPLIT_FLOOR)
    split_start = split * split_keys
    split_end = tl.minimum(split_start + split_keys, seq_len)
    if SPLIT_FLOOR > 0:
        if split > 0 and split_start >= seq_len:
            return  # no keys here: the reduce reads only the splits before this one (live_split_count)

    head_mask = heads < num_heads
    dims = tl.arange(0, BLOCK_R)
    dim_mask = dims < rank
    rope_dims = tl.arange(0, BLOCK_P)
    rope_mask = rope_dims < rope_dim
    q_mask = head_mask[:, None] & dim_mask[None, :]
    q_latent = tl.load(
        q_latent_ptr + seq * q_latent_stride_b + heads[:, None] * q_latent_stride_h + dims[None, :],
        mask=q_mask,
        other=0.0,
    )
    q_rope = tl.load(
        q_rope_ptr + seq * q_rope_stride_b + heads[:, None] * q_rope_stride_h + rope_dims[None, :],
        mask=head_mask[:, None] & rope_mask[None, :],
        other=0.0,
    )

    block_table_ptr = block_tables_ptr + seq * block_tables_stride
    token_width = rank + rope_dim
    m_i = tl.full([BLOCK_H], -1.0e30, dtype=tl.float32)  # log2 domain; finite so no -inf - -inf
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_R], dtype=tl.float32)
    for start_n in range(split_start, split_end, BLOCK_N):
        _, token_mask, slots = tile_slots(block_table_ptr, start_n, split_end, BLOCK_SIZE, BLOCK_N)
        rows = slots * token_width
        latent = tl.load(
            cache_ptr + rows[:, None] + dims[None, :], mask=token_mask[:, None] & dim_mask[None, :], other=0.0
        )  # [N, R]
        k_rope = tl.load(
            cache_ptr + rows[None, :] + rank + rope_dims[:, None],
            mask=rope_mask[:, None] & token_mask[None, :],
            other=0.0,
        )  # [P, N]
        scores = dot(q_latent, tl.trans(latent), DOT_IN_FP32) + dot(q_rope, k_rope, DOT_IN_FP32)
        scores = tl.where(token_mask[None, :], scores * scale_log2e, float("-inf"))
        p, alpha, m_i, l_i = softmax_step(scores, m_i, l_i)
        acc = acc * alpha[:, None] + dot(p.to(latent.dtype), latent, DOT_IN_FP32)

    store_split(
        out_ptr, partial_max_ptr, partial_sum_ptr, partial_acc_ptr, seq * num_heads + heads, split, num_splits,
        rank, dims, head_mask, q_mask, m_i, l_i, acc, SINGLE_SPLIT,
    )  # fmt: skip


def choose_num_splits(
    batch: int,
    head_groups: int,
    max_context: int,
    device: torch.device,
    min_keys: int = DEFAULT_TILES.min_keys_per_split,
) -> int:
    """``choose_splits`` for one program per (sequence, group of heads) and split."""
    return choose_splits(batch * head_groups, max_context, min_keys, _MAX_SPLITS, device)


def _launch(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None,
    tiles: MlaDecodeTiles | None = None,
) -> torch.Tensor:
    if q_latent.stride(-1) != 1 or q_rope.stride(-1) != 1:
        raise ValueError("q_latent and q_rope must be contiguous in their last dimension")
    batch, num_heads, rank = q_latent.shape
    rope_dim = q_rope.shape[2]
    block_size = latent_cache.shape[1]
    out = torch.empty((batch, num_heads, rank), dtype=q_latent.dtype, device=q_latent.device)
    if batch == 0:
        return out
    tiles = tiles or default_tiles(batch)
    head_groups = cdiv(num_heads, _HEADS_PER_PROGRAM)
    if num_splits is None:
        capacity = block_tables.shape[1] * block_size
        num_splits = choose_num_splits(
            batch, head_groups, capacity, q_latent.device, tiles.min_keys_per_split
        )
    partial_max, partial_sum, partial_acc = partials = split_partials(out, num_splits)
    split_floor = cdiv(tiles.split_floor, tiles.block_n) * tiles.block_n if num_splits > 1 else 0
    block_r = head_tile(rank)
    _mla_split_kernel[(batch, head_groups, num_splits)](
        q_latent, q_latent.stride(0), q_latent.stride(1), q_rope, q_rope.stride(0), q_rope.stride(1),
        latent_cache, block_tables, block_tables.stride(0), seq_lens, out, partial_max, partial_sum,
        partial_acc, scale * LOG2E, num_heads, rank, rope_dim, num_splits,
        BLOCK_SIZE=block_size, BLOCK_H=_HEADS_PER_PROGRAM, BLOCK_N=tiles.block_n, BLOCK_R=block_r,
        BLOCK_P=max(next_power_of_2(rope_dim), 16), DOT_IN_FP32=dot_in_fp32(q_latent.dtype),
        SINGLE_SPLIT=num_splits == 1, SPLIT_FLOOR=split_floor, num_warps=tiles.num_warps,
        **({} if tiles.num_stages is None else {"num_stages": tiles.num_stages}), **launch_overlap(q_latent.device, batch),
    )  # fmt: skip
    if num_splits > 1:
        live = (seq_lens, tiles.block_n, split_floor) if split_floor else None
        reduce_splits(partials, out, num_splits, block_r, live)
    return out


def gather_latents(latent_cache: torch.Tensor, block_table: torch.Tensor, context_len: int) -> torch.Tensor:
    """One sequence's first ``context_len`` cache rows ``[context_len, R + P]``, through its pages."""
    return gather_pages(latent_cache, block_table, context_len)


def mla_decode_reference(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Gathers each sequence's pages and attends in fp32; a row with no tokens gives zeros."""
    rank = q_latent.shape[2]
    out = torch.zeros(q_latent.shape, dtype=q_latent.dtype, device=q_latent.device)
    for b, seq_len in enumerate(seq_lens.tolist()):
        if seq_len <= 0:
            continue
        tokens = gather_latents(latent_cache, block_tables[b], seq_len).float()  # [L, R + P]
        latent = tokens[:, :rank]
        scores = (q_latent[b].float() @ latent.t() + q_rope[b].float() @ tokens[:, rank:].t()) * scale
        out[b] = (torch.softmax(scores, dim=-1) @ latent).to(q_latent.dtype)
    return out


def mla_decode(
    q_latent: torch.Tensor,
    q_rope: torch.Tensor,
    latent_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    num_splits: int | None = None,
    tiles: MlaDecodeTiles | None = None,
) -> torch.Tensor:
    """``q_latent: [B, H, R]``, ``q_rope: [B, H, P]``, one query per sequence -> ``[B, H, R]``.
    ``num_splits``: sequence splits of the Triton path (default: ``choose_num_splits``); ``tiles``:
    the Triton path's tiles (default: ``default_tiles(B)``; ``scripts/gpu/tune_mla_decode.py`` times
    the candidates)."""
    check_mla_inputs(q_latent, q_rope, latent_cache, block_tables, seq_lens)
    if num_splits is not None and num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    if use_triton(q_latent, q_rope, latent_cache, block_tables, seq_lens):
        return _launch(q_latent, q_rope, latent_cache, block_tables, seq_lens, scale, num_splits, tiles)
    return mla_decode_reference(q_latent, q_rope, latent_cache, block_tables, seq_lens, scale)

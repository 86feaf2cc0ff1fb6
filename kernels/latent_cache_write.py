"""Scatter this step's MLA latents into the paged latent cache ``[num_blocks, block_size, R + P]``.

Token ``t`` goes to slot ``slot_mapping[t] = block_id * block_size + offset`` as ``c[t]`` followed by
``k_rope[t]``; slot ``-1`` skips the token (padding, or a token whose latent is already cached). The
Triton path reads no flag back to the host, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch

from kernels._common import await_inputs, launch_overlap, next_power_of_2, tl, triton, use_triton

__all__ = ["write_latent", "write_latent_torch"]


@triton.jit
def _write_latent_kernel(
    c_ptr,
    c_token_stride,
    k_rope_ptr,
    k_rope_token_stride,
    cache_ptr,
    slot_mapping_ptr,
    rank,
    rope_dim,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    await_inputs(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot >= 0:
        row_ptr = cache_ptr + slot * (rank + rope_dim)
        dims = tl.arange(0, BLOCK_R)
        latent = tl.load(c_ptr + token * c_token_stride + dims, mask=dims < rank)
        tl.store(row_ptr + dims, latent.to(cache_ptr.dtype.element_ty), mask=dims < rank)
        rope_dims = tl.arange(0, BLOCK_P)
        k_rope = tl.load(k_rope_ptr + token * k_rope_token_stride + rope_dims, mask=rope_dims < rope_dim)
        tl.store(row_ptr + rank + rope_dims, k_rope.to(cache_ptr.dtype.element_ty), mask=rope_dims < rope_dim)


def _check(
    latent_cache: torch.Tensor, slot_mapping: torch.Tensor, c: torch.Tensor, k_rope: torch.Tensor
) -> None:
    if c.dim() != 2 or k_rope.dim() != 2 or c.shape[0] != k_rope.shape[0]:
        raise ValueError(f"c/k_rope must be [T, R] / [T, P], got {tuple(c.shape)} / {tuple(k_rope.shape)}")
    if latent_cache.dim() != 3 or latent_cache.shape[2] != c.shape[1] + k_rope.shape[1]:
        raise ValueError(f"latent_cache must be [blocks, block_size, R + P], got {tuple(latent_cache.shape)}")
    if not latent_cache.is_contiguous():
        raise ValueError("latent_cache must be contiguous")
    if slot_mapping.shape != (c.shape[0],) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping must be int [T={c.shape[0]}], got {tuple(slot_mapping.shape)}")


def _launch(
    latent_cache: torch.Tensor, slot_mapping: torch.Tensor, c: torch.Tensor, k_rope: torch.Tensor
) -> None:
    if c.stride(-1) != 1 or k_rope.stride(-1) != 1:
        raise ValueError("c and k_rope must be contiguous in their last dimension")
    tokens, rank = c.shape
    if tokens == 0:
        return
    _write_latent_kernel[(tokens,)](
        c, c.stride(0), k_rope, k_rope.stride(0), latent_cache, slot_mapping, rank, k_rope.shape[1],
        BLOCK_R=next_power_of_2(rank), BLOCK_P=next_power_of_2(k_rope.shape[1]), num_warps=4, **launch_overlap(c.device, tokens),
    )  # fmt: skip


def write_latent_torch(
    latent_cache: torch.Tensor, slot_mapping: torch.Tensor, c: torch.Tensor, k_rope: torch.Tensor
) -> None:
    slots = slot_mapping.long()
    rows = torch.cat([c, k_rope], dim=1).to(latent_cache.dtype)
    if bool((slots < 0).any()):  # padding rows: rare, and boolean indexing costs a decode step dearly
        keep = slots >= 0
        slots, rows = slots[keep], rows[keep]
    latent_cache.view(-1, latent_cache.shape[2]).index_copy_(0, slots, rows)


def write_latent(
    latent_cache: torch.Tensor, slot_mapping: torch.Tensor, c: torch.Tensor, k_rope: torch.Tensor
) -> None:
    """In place: ``latent_cache.view(-1, R + P)[slot_mapping[t]] = cat(c[t], k_rope[t])`` for every
    ``t`` whose slot is >= 0."""
    _check(latent_cache, slot_mapping, c, k_rope)
    if use_triton(latent_cache, slot_mapping, c, k_rope):
        _launch(latent_cache, slot_mapping, c, k_rope)
    else:
        write_latent_torch(latent_cache, slot_mapping, c, k_rope)

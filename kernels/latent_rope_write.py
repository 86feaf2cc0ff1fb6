"""Multi-head latent attention's step inputs in one pass: ``kv_a_layernorm`` over each token's latent
``c``, the rotary embedding of the query's rope part and of the shared rope key, and the latent-cache
write of ``[normed c | rotated k_rope]``.

Replaces three launches per layer (``rms_norm``, ``rotary_embedding``, ``write_latent``); at batch 1
they are three of a DeepSeek layer's ~14 kernels. The rounding points are those kernels' own (the
norm's two roundings, the rotation rounded once); only the order of the norm's fp32 sum of squares
may differ. ``q_rope`` and the ``latent`` rows may be strided views of the fused input projection's
output.
"""

from __future__ import annotations

import torch

from kernels._common import (
    await_inputs,
    check_last_dim_contiguous,
    launch_overlap,
    next_power_of_2,
    tl,
    triton,
    use_triton,
)
from kernels.latent_cache_write import write_latent_torch
from kernels.rms_norm import rms_norm_torch
from kernels.rotary import rotary_embedding_torch, rotate_pairs, token_rotation

__all__ = ["latent_rope_write", "latent_rope_write_torch"]


@triton.jit
def _latent_rope_write_kernel(
    positions_ptr,
    cos_sin_ptr,
    cos_sin_row_stride,
    q_ptr,
    q_token_stride,
    q_head_stride,
    latent_ptr,
    latent_token_stride,
    norm_ptr,
    eps,
    q_out_ptr,
    latent_out_ptr,
    cache_ptr,
    slot_mapping_ptr,
    num_heads,
    rank,
    half_dim,
    IS_NEOX: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program ``(t, b)``: query head ``b`` of token ``t``, or, for ``b == num_heads``, the token's
    latent (normed), its rope key (rotated) and their cache row."""
    await_inputs(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cos, sin, offs_1, offs_2, pair_mask = token_rotation(
        positions_ptr, token, cos_sin_ptr, cos_sin_row_stride, half_dim, IS_NEOX, BLOCK_HALF
    )
    rope_dim = 2 * half_dim
    one = tl.arange(0, 1)
    mask = pair_mask[None, :]
    if block < num_heads:
        src = q_ptr + token * q_token_stride + block * q_head_stride
        q_1, q_2 = rotate_pairs(src, one, 0, offs_1, offs_2, mask, cos, sin)
        row = q_out_ptr + (token * num_heads + block) * rope_dim + one[:, None] * 0
        tl.store(row + offs_1[None, :], q_1.to(q_out_ptr.dtype.element_ty), mask=mask)
        tl.store(row + offs_2[None, :], q_2.to(q_out_ptr.dtype.element_ty), mask=mask)
    else:
        src = latent_ptr + token * latent_token_stride
        dims = tl.arange(0, BLOCK_R)
        dim_mask = dims < rank
        x = tl.load(src + dims, mask=dim_mask, other=0.0)
        xf = x.to(tl.float32)
        normed = (xf * tl.rsqrt(tl.sum(xf * xf, axis=0) / rank + eps)).to(x.dtype).to(tl.float32)
        gamma = tl.load(norm_ptr + dims, mask=dim_mask, other=0.0).to(tl.float32)
        c = (normed * gamma).to(latent_out_ptr.dtype.element_ty)
        k_1, k_2 = rotate_pairs(src + rank, one, 0, offs_1, offs_2, mask, cos, sin)
        k_1 = k_1.to(latent_out_ptr.dtype.element_ty)
        k_2 = k_2.to(latent_out_ptr.dtype.element_ty)
        width = rank + rope_dim
        out = latent_out_ptr + token * width
        tl.store(out + dims, c, mask=dim_mask)
        tl.store(out + rank + offs_1[None, :], k_1, mask=mask)
        tl.store(out + rank + offs_2[None, :], k_2, mask=mask)
        slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
        if slot >= 0:
            cache_row = cache_ptr + slot * width
            cache_dtype = cache_ptr.dtype.element_ty
            tl.store(cache_row + dims, c.to(cache_dtype), mask=dim_mask)
            tl.store(cache_row + rank + offs_1[None, :], k_1.to(cache_dtype), mask=mask)
            tl.store(cache_row + rank + offs_2[None, :], k_2.to(cache_dtype), mask=mask)


def _check(positions, q_rope, latent, norm_weight, cos_sin_cache, latent_cache, slot_mapping) -> None:
    if q_rope.dim() != 3 or latent.dim() != 2 or latent.shape[0] != q_rope.shape[0]:
        raise ValueError(
            f"q_rope must be [T, H, P] and latent [T, R + P], got {tuple(q_rope.shape)} and {tuple(latent.shape)}"
        )
    tokens, _, rope_dim = q_rope.shape
    rank = latent.shape[1] - rope_dim
    if rank <= 0 or rope_dim % 2 or norm_weight.shape != (rank,):
        raise ValueError(
            f"latent rows of {latent.shape[1]} values hold R + P = {rank} + {rope_dim} with an even P "
            f"and a norm weight of R values, got weight {tuple(norm_weight.shape)}"
        )
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rope_dim:
        raise ValueError(f"cos_sin_cache must be [max_pos, {rope_dim}], got {tuple(cos_sin_cache.shape)}")
    if (
        latent_cache.dim() != 3
        or latent_cache.shape[2] != rank + rope_dim
        or not latent_cache.is_contiguous()
    ):
        raise ValueError(
            f"latent_cache must be a contiguous [blocks, block_size, {rank + rope_dim}], got {tuple(latent_cache.shape)}"
        )
    for name, t in (("positions", positions), ("slot_mapping", slot_mapping)):
        if t.shape != (tokens,) or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name} must be int [T={tokens}], got {tuple(t.shape)}")


def latent_rope_write_torch(
    positions: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    latent_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rope_dim = q_rope.shape[2]
    c, k_rope = latent.split([latent.shape[1] - rope_dim, rope_dim], dim=-1)
    c = rms_norm_torch(c, norm_weight, eps)
    q_rope, k_rope = rotary_embedding_torch(positions, q_rope, k_rope.unsqueeze(1), cos_sin_cache, is_neox)
    k_rope = k_rope.squeeze(1)
    write_latent_torch(latent_cache, slot_mapping, c, k_rope)
    return q_rope, c, k_rope


def _launch(positions, q_rope, latent, norm_weight, eps, cos_sin_cache, is_neox, latent_cache, slot_mapping):
    check_last_dim_contiguous("q_rope", q_rope)
    check_last_dim_contiguous("latent", latent)
    tokens, num_heads, rope_dim = q_rope.shape
    rank = latent.shape[1] - rope_dim
    q_out = torch.empty((tokens, num_heads, rope_dim), dtype=q_rope.dtype, device=q_rope.device)
    latent_out = torch.empty((tokens, rank + rope_dim), dtype=latent.dtype, device=latent.device)
    if tokens:
        _latent_rope_write_kernel[(tokens, num_heads + 1)](
            positions, cos_sin_cache, cos_sin_cache.stride(0), q_rope, q_rope.stride(0), q_rope.stride(1),
            latent, latent.stride(0), norm_weight, eps, q_out, latent_out, latent_cache, slot_mapping,
            num_heads, rank, rope_dim // 2, IS_NEOX=is_neox, BLOCK_R=next_power_of_2(rank),
            BLOCK_HALF=next_power_of_2(rope_dim // 2), num_warps=4, **launch_overlap(latent.device, tokens),
        )  # fmt: skip
    c, k_rope = latent_out.split([rank, rope_dim], dim=-1)
    return q_out, c, k_rope


def latent_rope_write(
    positions: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
    latent_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``q_rope: [T, H, P]`` and ``latent: [T, R + P]`` (``c`` then ``k_rope``, before the norm and the
    rotation) -> the rotated query part ``[T, H, P]``, normed ``c: [T, R]`` and rotated ``k_rope:
    [T, P]``; ``latent_cache.view(-1, R + P)[slot_mapping[t]]`` gets ``[c | k_rope]`` of every token
    whose slot is >= 0. The norm is an RMSNorm rounded as ``kernels/rms_norm.py``'s default."""
    _check(positions, q_rope, latent, norm_weight, cos_sin_cache, latent_cache, slot_mapping)
    args = (positions, q_rope, latent, norm_weight, eps, cos_sin_cache, is_neox, latent_cache, slot_mapping)
    if use_triton(positions, q_rope, latent, norm_weight, latent_cache):
        return _launch(*args)
    return latent_rope_write_torch(*args)

"""Rotary embedding and the paged KV-cache write in one pass over this step's q/k/v.

Replaces three launches per layer (``rotary_embedding``, ``v.contiguous()``, ``write_kv_cache``):
q and k are read once, rotated (by ``kernels/rotary.py``'s own jit helpers, so the results are
bit for bit the same), q goes to a new ``[T, Hq, D]`` tensor, rotated k and raw v go straight into
the cache. q/k/v may be strided views of the fused QKV projection output (``head_dim`` contiguous).
Cache layout and slot rule as in ``kernels/kv_cache_write.py``: slot ``-1`` skips the write.

With ``qk_norm`` (Qwen3, Gemma 3: an RMSNorm over each head of q and of k before the rotary
embedding) the norms happen in the same pass, rounded where ``kernels/rms_norm.py`` rounds them, so
a layer launches one kernel where it launched three; only the order of the fp32 sum of squares
differs from the separate norm kernel's.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from kernels._common import (
    await_inputs,
    cdiv,
    check_last_dim_contiguous,
    launch_overlap,
    next_power_of_2,
    tl,
    triton,
    use_triton,
)
from kernels.kv_cache_write import check_caches_contiguous, write_kv_cache_torch
from kernels.rms_norm import rms_norm_torch
from kernels.rotary import rotary_embedding_torch, rotate_pairs, token_rotation

__all__ = ["QKNorm", "rope_and_write_kv", "rope_and_write_kv_torch"]


class QKNorm(NamedTuple):
    """The per-head RMSNorms of q and k (``engine.layers.norm.RMSNorm``'s weight, eps and rounding)."""

    q_weight: torch.Tensor
    k_weight: torch.Tensor
    eps: float
    round_normed: bool = True


# Below this many tokens every program rotates one head: a decode step then spreads over
# T * (Hq + Hk) programs instead of T, which is what keeps this launch short inside a graph.
_ONE_HEAD_PER_PROGRAM_TOKENS = 128


@triton.jit
def _normed_pairs(
    src_ptr,
    heads,
    head_stride,
    offs_1,
    offs_2,
    mask,
    pair_mask,
    norm_ptr,
    eps,
    head_dim,
    ROUND_NORMED: tl.constexpr,
):
    """Each head's two pair halves after its RMSNorm, rounded to the source dtype as the norm kernel
    stores them, back in fp32 for the rotation."""
    x1 = tl.load(src_ptr + heads[:, None] * head_stride + offs_1[None, :], mask=mask, other=0.0)
    x2 = tl.load(src_ptr + heads[:, None] * head_stride + offs_2[None, :], mask=mask, other=0.0)
    x1f, x2f = x1.to(tl.float32), x2.to(tl.float32)
    variance = (tl.sum(x1f * x1f, axis=1) + tl.sum(x2f * x2f, axis=1)) / head_dim
    scale = tl.rsqrt(variance + eps)[:, None]
    n1, n2 = x1f * scale, x2f * scale
    if ROUND_NORMED:
        n1, n2 = n1.to(x1.dtype).to(tl.float32), n2.to(x1.dtype).to(tl.float32)
    w1 = tl.load(norm_ptr + offs_1, mask=pair_mask, other=0.0).to(tl.float32)
    w2 = tl.load(norm_ptr + offs_2, mask=pair_mask, other=0.0).to(tl.float32)
    return (n1 * w1[None, :]).to(x1.dtype).to(tl.float32), (n2 * w2[None, :]).to(x1.dtype).to(tl.float32)


@triton.jit
def _rotated_heads(
    src_ptr, heads, head_stride, offs_1, offs_2, mask, pair_mask, cos, sin, norm_ptr, eps, head_dim,
    QK_NORM: tl.constexpr, ROUND_NORMED: tl.constexpr,
):  # fmt: skip
    """The heads' pair halves, RMS-normed first with ``QK_NORM``, rotated, rounded to the source dtype."""
    if QK_NORM:
        x1f, x2f = _normed_pairs(src_ptr, heads, head_stride, offs_1, offs_2, mask, pair_mask, norm_ptr, eps,
                                 head_dim, ROUND_NORMED)  # fmt: skip
        out_1 = x1f * cos[None, :] - x2f * sin[None, :]
        out_2 = x2f * cos[None, :] + x1f * sin[None, :]
    else:
        out_1, out_2 = rotate_pairs(src_ptr, heads, head_stride, offs_1, offs_2, mask, cos, sin)
    return out_1.to(src_ptr.dtype.element_ty), out_2.to(src_ptr.dtype.element_ty)


@triton.jit
def _rope_kv_write_kernel(
    positions_ptr,
    cos_sin_ptr,
    cos_sin_row_stride,
    q_ptr,
    q_token_stride,
    q_head_stride,
    k_ptr,
    k_token_stride,
    k_head_stride,
    v_ptr,
    v_token_stride,
    v_head_stride,
    q_out_ptr,
    k_out_ptr,
    v_out_ptr,
    k_cache_ptr,
    v_cache_ptr,
    slot_mapping_ptr,
    q_norm_ptr,
    k_norm_ptr,
    norm_eps,
    num_q_heads,
    num_kv_heads,
    num_q_blocks,
    half_dim,
    IS_NEOX: tl.constexpr,
    RETURN_KV: tl.constexpr,
    QK_NORM: tl.constexpr,
    ROUND_NORMED: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """Program ``(t, b)``: head block ``b`` of token ``t``; blocks ``< num_q_blocks`` hold query
    heads, the rest KV heads (whose k is rotated and whose v is copied)."""
    await_inputs(USE_PDL)
    token = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    cos, sin, offs_1, offs_2, pair_mask = token_rotation(
        positions_ptr, token, cos_sin_ptr, cos_sin_row_stride, half_dim, IS_NEOX, BLOCK_HALF
    )
    head_dim = 2 * half_dim
    if block < num_q_blocks:
        heads = block * BLOCK_H + tl.arange(0, BLOCK_H)
        mask = (heads < num_q_heads)[:, None] & pair_mask[None, :]
        q_1, q_2 = _rotated_heads(q_ptr + token * q_token_stride, heads, q_head_stride, offs_1, offs_2, mask,
                                  pair_mask, cos, sin, q_norm_ptr, norm_eps, head_dim, QK_NORM, ROUND_NORMED)  # fmt: skip
        q_row = q_out_ptr + token * num_q_heads * head_dim + heads[:, None] * head_dim
        tl.store(q_row + offs_1[None, :], q_1, mask=mask)
        tl.store(q_row + offs_2[None, :], q_2, mask=mask)
    else:
        heads = (block - num_q_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
        mask = (heads < num_kv_heads)[:, None] & pair_mask[None, :]
        k_1, k_2 = _rotated_heads(k_ptr + token * k_token_stride, heads, k_head_stride, offs_1, offs_2, mask,
                                  pair_mask, cos, sin, k_norm_ptr, norm_eps, head_dim, QK_NORM, ROUND_NORMED)  # fmt: skip
        v_row = v_ptr + token * v_token_stride + heads[:, None] * v_head_stride
        v_1 = tl.load(v_row + offs_1[None, :], mask=mask, other=0.0)
        v_2 = tl.load(v_row + offs_2[None, :], mask=mask, other=0.0)
        if RETURN_KV:
            kv_row = token * num_kv_heads * head_dim + heads[:, None] * head_dim
            tl.store(k_out_ptr + kv_row + offs_1[None, :], k_1, mask=mask)
            tl.store(k_out_ptr + kv_row + offs_2[None, :], k_2, mask=mask)
            tl.store(v_out_ptr + kv_row + offs_1[None, :], v_1, mask=mask)
            tl.store(v_out_ptr + kv_row + offs_2[None, :], v_2, mask=mask)
        slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
        if slot >= 0:
            cache = slot * num_kv_heads * head_dim + heads[:, None] * head_dim
            k_dtype = k_cache_ptr.dtype.element_ty
            v_dtype = v_cache_ptr.dtype.element_ty
            tl.store(k_cache_ptr + cache + offs_1[None, :], k_1.to(k_dtype), mask=mask)
            tl.store(k_cache_ptr + cache + offs_2[None, :], k_2.to(k_dtype), mask=mask)
            tl.store(v_cache_ptr + cache + offs_1[None, :], v_1.to(v_dtype), mask=mask)
            tl.store(v_cache_ptr + cache + offs_2[None, :], v_2.to(v_dtype), mask=mask)


def _check(positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping, qk_norm=None) -> None:
    if q.dim() != 3 or k.dim() != 3 or v.shape != k.shape:
        raise ValueError(
            f"q must be [T, Hq, D] and k/v [T, Hk, D], got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    tokens, _, head_dim = q.shape
    if k.shape[0] != tokens or k.shape[2] != head_dim or head_dim % 2:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on tokens or head_dim")
    if positions.shape != (tokens,) or positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"positions must be int [T={tokens}], got {tuple(positions.shape)}")
    if slot_mapping.shape != (tokens,) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"slot_mapping must be int [T={tokens}], got {tuple(slot_mapping.shape)}")
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != head_dim:
        raise ValueError(f"cos_sin_cache must be [max_pos, {head_dim}], got {tuple(cos_sin_cache.shape)}")
    if k_cache.dim() != 4 or v_cache.shape != k_cache.shape or k_cache.shape[2:] != k.shape[1:]:
        raise ValueError(
            f"caches must both be [blocks, block_size, {k.shape[1]}, {head_dim}], "
            f"got {tuple(k_cache.shape)} / {tuple(v_cache.shape)}"
        )
    check_caches_contiguous(k_cache, v_cache)
    if qk_norm is not None:
        for name, weight in (("q", qk_norm.q_weight), ("k", qk_norm.k_weight)):
            if weight.shape != (head_dim,) or weight.stride(0) != 1:
                raise ValueError(
                    f"the {name} norm's weight must be contiguous [{head_dim}], got {tuple(weight.shape)}"
                )


def _launch(positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping, is_neox, return_kv, qk_norm):
    for name, t in (("q", q), ("k", k), ("v", v), ("cos_sin_cache", cos_sin_cache)):
        check_last_dim_contiguous(name, t)
    tokens, num_q_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    q_out = torch.empty((tokens, num_q_heads, head_dim), dtype=q.dtype, device=q.device)
    k_out = (
        torch.empty((tokens, num_kv_heads, head_dim), dtype=k.dtype, device=k.device) if return_kv else None
    )
    v_out = torch.empty_like(k_out) if return_kv else None
    if tokens == 0:
        return q_out, k_out, v_out
    block_h = 1 if tokens < _ONE_HEAD_PER_PROGRAM_TOKENS else min(4, next_power_of_2(num_kv_heads))
    block_half = next_power_of_2(head_dim // 2)
    num_q_blocks = cdiv(num_q_heads, block_h)
    _rope_kv_write_kernel[(tokens, num_q_blocks + cdiv(num_kv_heads, block_h))](
        positions,
        cos_sin_cache,
        cos_sin_cache.stride(0),
        q,
        q.stride(0),
        q.stride(1),
        k,
        k.stride(0),
        k.stride(1),
        v,
        v.stride(0),
        v.stride(1),
        q_out,
        k_out if return_kv else q_out,
        v_out if return_kv else q_out,
        k_cache,
        v_cache,
        slot_mapping,
        qk_norm.q_weight if qk_norm is not None else cos_sin_cache,
        qk_norm.k_weight if qk_norm is not None else cos_sin_cache,
        qk_norm.eps if qk_norm is not None else 0.0,
        num_q_heads,
        num_kv_heads,
        num_q_blocks,
        head_dim // 2,
        IS_NEOX=is_neox,
        RETURN_KV=return_kv,
        QK_NORM=qk_norm is not None,
        ROUND_NORMED=qk_norm is None or qk_norm.round_normed,
        BLOCK_H=block_h,
        BLOCK_HALF=block_half,
        num_warps=max(1, min(4, block_h * block_half // 64)),
        **launch_overlap(positions.device, tokens),
    )
    return q_out, k_out, v_out


def rope_and_write_kv_torch(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    is_neox: bool = True,
    return_kv: bool = False,
    qk_norm: QKNorm | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    if qk_norm is not None:
        q = rms_norm_torch(q, qk_norm.q_weight, qk_norm.eps, qk_norm.round_normed)
        k = rms_norm_torch(k, qk_norm.k_weight, qk_norm.eps, qk_norm.round_normed)
    q_rot, k_rot = rotary_embedding_torch(positions, q, k, cos_sin_cache, is_neox)
    write_kv_cache_torch(k_rot, v, k_cache, v_cache, slot_mapping)
    if not return_kv:
        return q_rot, None, None
    return q_rot, k_rot, v.contiguous()


def rope_and_write_kv(
    positions: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    is_neox: bool = True,
    return_kv: bool = False,
    qk_norm: QKNorm | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Rotate ``q: [T, Hq, D]`` and ``k: [T, Hk, D]`` at ``positions`` (each head RMS-normed first
    with ``qk_norm``), write rotated k and ``v`` into the caches at ``slot_mapping`` (slot < 0: skip).
    Returns ``(q_rotated, k_rotated, v)`` as new contiguous tensors; k and v only with ``return_kv``
    (None otherwise)."""
    _check(positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping, qk_norm)
    args = (positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping, is_neox, return_kv, qk_norm)
    if use_triton(positions, q, k, v, cos_sin_cache, k_cache, v_cache, slot_mapping):
        return _launch(*args)
    return rope_and_write_kv_torch(*args)
